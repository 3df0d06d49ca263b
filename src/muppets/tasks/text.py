"""A task's text without its labels: the corpus of task-adaptive pretraining (TAPT, Gururangan
et al. 2020, "Don't Stop Pretraining": continue MLM on the unlabeled text of the task's own
training split before fine-tuning).

``muppets data task-text sst2 --out runs/tapt/sst2.jsonl`` writes one JSON line per example,
``{"text": …}``, that ``muppets pretrain … corpus.inputs=[runs/tapt/sst2.jsonl]`` reads as one
document per example (the corpus readers' ``jsonl`` format: paragraphs are separated by a blank
line). What an example contributes:

=============  ===========================================================
kind           paragraphs
=============  ===========================================================
classify etc.  the text, and the second text of a pair
tag            the tokens joined by single spaces
span           the context (once per distinct context), then the question
choice         the context, then every ending (the right one is not marked)
=============  ===========================================================

Only the split named is read (``train`` by default): dev and test text must not be seen before
the model is scored on them.
"""

from __future__ import annotations

import json
from pathlib import Path

from muppets.config import atomic_path
from muppets.errors import ConfigError
from muppets.tasks.spec import ChoiceExample, Example, SpanExample, TagExample, TextExample


def example_paragraphs(example: Example, seen_contexts: set[str] | None = None) -> list[str]:
    """The unlabeled text of one example as paragraphs (see the module docstring);
    ``seen_contexts`` (span tasks) skips a context already written."""
    if isinstance(example, TextExample):
        return [t for t in (example.text, example.text_b) if t]
    if isinstance(example, TagExample):
        return [" ".join(example.tokens)] if example.tokens else []
    if isinstance(example, SpanExample):
        out = []
        if seen_contexts is None or example.context not in seen_contexts:
            out.append(example.context)
            if seen_contexts is not None:
                seen_contexts.add(example.context)
        return out + [example.question]
    if isinstance(example, ChoiceExample):
        return [example.context, *example.endings]
    raise TypeError(f"not a task example: {type(example).__name__}")


def write_task_text(examples: list[Example], out: str | Path, overwrite: bool = False) -> int:
    """Write ``examples``' unlabeled text to ``out`` (jsonl, one line per example with text),
    atomically; an existing file is refused unless ``overwrite``. Returns the lines written."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise ConfigError(f"{out} exists; choose another path or pass --overwrite")
    seen: set[str] = set()
    written = 0
    with atomic_path(out) as tmp, tmp.open("w", encoding="utf-8") as fh:
        for example in examples:
            paragraphs = [" ".join(p.split()) for p in example_paragraphs(example, seen)]
            paragraphs = [p for p in paragraphs if p]
            if paragraphs:
                fh.write(json.dumps({"text": "\n\n".join(paragraphs)}, ensure_ascii=False) + "\n")
                written += 1
    return written
