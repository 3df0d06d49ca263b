"""The transfer set: the examples the teacher labels and the student learns from.

Three sources, in this order:

1. **the task's training examples** (less the slice that selects the model), with their gold
   labels: soft targets and, with ``alpha < 1``, the gold loss;
2. **unlabeled text** (``unlabeled``): corpus files in any format ``data prepare`` reads, cut
   into sentences or taken a paragraph at a time (``unlabeled_unit``; the ``lines`` format makes
   every line a paragraph) — one example each; a pair task reads consecutive ones as its two texts;
   a tagging task splits words and punctuation apart, as CoNLL is tokenised), or
   ``task:<split>``, a split of the teacher's task read without its labels. Extractive QA and
   multiple choice take no unlabeled text (a corpus sentence is no question with a context);
3. **augmented copies** of the training examples (``augment`` per example; Tang et al. 2019,
   §3.3): every word becomes ``[MASK]`` with probability ``augment_mask``, and with
   probability ``augment_ngram`` a single text is replaced by a random n-gram of it
   (n = 1..5 words). Tang et al. also swap words for others of the same part of speech; muppets
   has no tagger for that and leaves it out. Copies carry no gold label: the teacher labels them.

**No leak from held-out examples**: unlabeled texts that share an 8-word shingle with a dev or
test example, or with an example that selects the model (the train slice held out, by default;
the whole text, when it has fewer words) are dropped — a corpus drawn from the task's own
source (e.g. movie-review snippets for SST-2) holds the very sentences the student is scored
and chosen on, and a teacher's labels on them would be a second look at the answers. The
splits the run reports are never read as ``task:<split>``.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from muppets.errors import ConfigError
from muppets.tasks.spec import TagExample, TaskData, TextExample

log = logging.getLogger(__name__)

SHINGLE = 8  # words per shingle of the leak filter
_WORDS = re.compile(r"\w+|[^\w\s]")
_REPORTED = ("dev", "test")


@dataclass
class TransferSet:
    """The examples and where each part came from (counts for the run's summary)."""

    examples: list  # train first, then unlabeled, then augmented
    counts: dict[str, int]  # {"train", "unlabeled", "augmented", "unlabeled_dropped_as_leaks"}


def words_of(text: str) -> list[str]:
    """Words and punctuation apart (how CoNLL-2003 is tokenised).

    >>> words_of("Paris, France's capital.")
    ['Paris', ',', 'France', "'", 's', 'capital', '.']
    """
    return _WORDS.findall(text)


def shingles(text: str) -> set[tuple[str, ...]]:
    """The text's lowercased :data:`SHINGLE`-word windows (the whole text when shorter)."""
    w = [x.lower() for x in _WORDS.findall(text) if x.isalnum()]
    if len(w) <= SHINGLE:
        return {tuple(w)} if w else set()
    return {tuple(w[i: i + SHINGLE]) for i in range(len(w) - SHINGLE + 1)}


def example_texts(example: Any) -> list[str]:
    """The texts of an example (both of a pair; a tagged sentence's words joined)."""
    if isinstance(example, TagExample):
        return [" ".join(example.tokens)]
    if isinstance(example, TextExample):
        return [t for t in (example.text, example.text_b) if t]
    return [t for t in (getattr(example, "question", None), getattr(example, "context", None)) if t]


def held_out_shingles(data: TaskData, selecting: Sequence[Any] = ()) -> set[tuple[str, ...]]:
    """Every shingle of the dev and test examples and of the examples that select the model."""
    out: set[tuple[str, ...]] = set()
    for ex in [*(ex for split in _REPORTED for ex in data.splits.get(split, [])), *selecting]:
        for text in example_texts(ex):
            out |= shingles(text)
    return out


def corpus_examples(kind: str, paths: Sequence[str], fmt: str = "auto", unit: str = "sentence") -> Iterator[Any]:
    """Unlabeled examples of ``kind`` from corpus files, one per sentence (``unit="paragraph"``:
    per paragraph; pairs: consecutive ones of a document)."""
    from muppets.data.readers import iter_documents
    from muppets.data.sentences import split_sentences
    from muppets.paths import resolve_data_path

    if kind in ("span", "choice"):
        raise ConfigError(f"unlabeled: a {kind} task takes no corpus text (a sentence is no question with a context "
                          "or endings); use augment, or task:<split> of a split without labels", key="unlabeled")
    previous = None
    for doc in iter_documents([resolve_data_path(p) for p in paths], fmt, errors="replace"):
        for number, paragraph in enumerate(doc.paragraphs):
            for k, sentence in enumerate(split_sentences(paragraph) if unit == "sentence" else [paragraph]):
                source = f"{doc.source}#{number}.{k}"
                if kind == "tag":
                    yield TagExample(source, words_of(sentence), None, source)
                elif kind == "pair":
                    if previous is not None:
                        yield TextExample(source, previous, sentence, None, source)
                    previous = sentence
                else:
                    yield TextExample(source, sentence, None, None, source)
            if unit == "sentence":
                previous = None  # sentence pairs never straddle paragraphs


def split_examples(data: TaskData, spec: str) -> list[Any]:
    """``task:<split>``: that split of the task, labels removed (never a reported split)."""
    split = spec.split(":", 1)[1]
    if split in _REPORTED:
        raise ConfigError(f"unlabeled: {spec}: the {split} split is what the run reports; its text is never "
                          "training data, labelled or not", key="unlabeled")
    if split not in data.splits:
        raise ConfigError(f"unlabeled: {spec}: the task has no split {split!r} (it has {', '.join(data.splits)})",
                          key="unlabeled")
    return [unlabel(ex) for ex in data.splits[split]]


def unlabel(example: Any) -> Any:
    """The example without its gold label (the teacher's soft targets replace it)."""
    if isinstance(example, TagExample):
        return dataclasses.replace(example, tags=None)
    if isinstance(example, TextExample):
        return dataclasses.replace(example, label=None, probs=None)
    if hasattr(example, "answers"):
        return dataclasses.replace(example, answers=[])
    return dataclasses.replace(example, label=None)


def augmented(example: Any, rng: random.Random, p_mask: float, p_ngram: float, mask: str) -> Any:
    """One perturbed, unlabelled copy of ``example`` (see the module docstring)."""
    def masked(words: list[str]) -> list[str]:
        return [mask if rng.random() < p_mask else w for w in words]

    if isinstance(example, TagExample):
        return TagExample(example.id + "+aug", masked(list(example.tokens)), None, example.source)
    if not isinstance(example, TextExample):
        raise ConfigError("augment: extractive QA and multiple choice are not augmented (a masked context no longer "
                          "holds its answer); set augment=0", key="augment")
    a = masked(example.text.split())
    if example.text_b is None:
        if a and rng.random() < p_ngram:
            n = rng.randint(1, min(5, len(a)))
            start = rng.randint(0, len(a) - n)
            a = a[start: start + n]
        return TextExample(example.id + "+aug", " ".join(a), None, None, example.source)
    b = masked(example.text_b.split())
    return TextExample(example.id + "+aug", " ".join(a), " ".join(b), None, example.source)


def build_transfer_set(kind: str, train: list, data: TaskData, unlabeled: Sequence[str], max_unlabeled: int,
                       augment: int, p_mask: float, p_ngram: float, seed: int, mask_token: str,
                       fmt: str = "auto", unit: str = "sentence", selecting: Sequence[Any] = ()) -> TransferSet:
    """The examples of the module docstring, in order: train, unlabeled, augmented."""
    extra: list[Any] = []
    files = [p for p in unlabeled if not p.startswith("task:")]
    for spec in unlabeled:
        if spec.startswith("task:"):
            extra += split_examples(data, spec)
    if files:
        extra += list(corpus_examples(kind, files, fmt, unit))
    dropped = 0
    if extra:
        seen = held_out_shingles(data, selecting)
        kept = [ex for ex in extra if not any(shingles(t) & seen for t in example_texts(ex))]
        dropped = len(extra) - len(kept)
        if dropped:
            log.info("unlabeled: %d of %d texts dropped: they share %d-word shingles with the dev / test examples "
                     "or those that select the model",
                     dropped, len(extra), SHINGLE)
        extra = kept[:max_unlabeled] if max_unlabeled else kept
        if not extra:
            raise ConfigError(f"unlabeled: {list(unlabeled)} gave no text (after dropping {dropped} that overlap "
                              "the held-out examples)", key="unlabeled")
    rng = random.Random(seed)
    copies = [augmented(ex, rng, p_mask, p_ngram, mask_token) for ex in train for _ in range(augment)]
    counts = {"train": len(train), "unlabeled": len(extra), "augmented": len(copies),
              "unlabeled_dropped_as_leaks": dropped}
    log.info("transfer set: %s", ", ".join(f"{k} {v}" for k, v in counts.items()))
    return TransferSet([*train, *extra, *copies], counts)
