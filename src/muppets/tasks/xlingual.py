"""Cross-lingual sentence-pair tasks: XNLI and PAWS-X dev, one task per language (README §9–10).

``xnli-<lang>`` reads ``xnli/dev-<lang>.tsv`` (no header; premise, hypothesis, label string;
CRLF; no quoting) and ``pawsx-<lang>`` reads ``paws-x/dev-<lang>.tsv`` (no header; sentence1,
sentence2, 0/1; CRLF; CSV quoting where a field contains ``"``).

Only labelled dev files exist, so each is split 80/20 into ``train`` / ``dev`` by
:func:`~muppets.tasks.splits.hash_split` on the **row number**. The files are parallel across
languages (row i is the same pair), so row i lands on the same side in every language: train
on ``xnli-en`` ``train`` and evaluate zero-shot on ``xnli-de`` ``dev`` without leakage.

PAWS-X rows whose translation is the literal ``NS`` (not translated) are dropped after the
split and counted in :attr:`TaskData.dropped` (de 68, es 38, zh 16, fr 8, en 0).
"""

from __future__ import annotations

from pathlib import Path

from muppets.errors import ConfigError
from muppets.tasks.source import Problems
from muppets.tasks.spec import TaskData, TaskSpec, TextExample
from muppets.tasks.splits import hash_split
from muppets.tasks.table import Columns, LabelRule, read_text_file

__all__ = ["XNLI_LABELS", "XLINGUAL_DEV_FRACTION", "load_xnli", "load_pawsx"]

XNLI_LABELS = ["entailment", "neutral", "contradiction"]
PAWSX_LABELS = ["0", "1"]  # 1 = paraphrase
XLINGUAL_DEV_FRACTION = 0.2
UNTRANSLATED = "NS"
_COLUMNS = Columns(text=0, text_b=1, label=2)


def _row_key(example: TextExample) -> str:
    return example.id.rsplit("-", 1)[1]  # ids are "<stem>-<row>": the row number


def _dev_file(root: Path, folder: str, lang: str) -> Path:
    path = root / folder / f"dev-{lang}.tsv"
    if not path.is_file():
        have = sorted(p.stem[4:] for p in (root / folder).glob("dev-*.tsv"))
        raise ConfigError(f"no {folder} file for language {lang!r} ({path}); "
                          f"languages available: {have}")
    return path


def _split(examples: list[TextExample]) -> dict[str, list[TextExample]]:
    train, dev = hash_split(examples, [_row_key(ex) for ex in examples], XLINGUAL_DEV_FRACTION)
    return {"train": train, "dev": dev}


def _split_note(lang: str, name: str, total: int) -> str:
    return (f"{name} has no labelled train/test here: dev-{lang}.tsv ({total} rows) is split "
            f"{1 - XLINGUAL_DEV_FRACTION:.0%}/{XLINGUAL_DEV_FRACTION:.0%} into train/dev by "
            "hash_split on the row number, the same rows in every language.")


def load_xnli(root: Path, problems: Problems, lang: str) -> TaskData:
    """XNLI dev in ``lang`` (2,490 pairs, 830 per label), split 80/20 into train / dev."""
    path = _dev_file(root, "xnli", lang)
    rule = LabelRule("pair", XNLI_LABELS)
    examples = read_text_file(path, "tsv", _COLUMNS, rule, problems, header=False, width=3)
    spec = TaskSpec(f"xnli-{lang}", "pair", XNLI_LABELS, "accuracy", ("premise", "hypothesis"))
    return TaskData(spec, _split(examples), notes=_split_note(lang, "XNLI", len(examples)))


def _is_untranslated(example: TextExample) -> bool:
    return UNTRANSLATED in (example.text, example.text_b)


def load_pawsx(root: Path, problems: Problems, lang: str) -> TaskData:
    """PAWS-X dev in ``lang`` (2,000 pairs), split 80/20, untranslated ``NS`` rows dropped."""
    path = _dev_file(root, "paws-x", lang)
    rule = LabelRule("pair", PAWSX_LABELS)
    examples = read_text_file(path, "tsv-quoted", _COLUMNS, rule, problems, header=False,
                              width=3)
    splits = _split(examples)
    dropped = 0
    for name, exs in splits.items():
        kept = [ex for ex in exs if not _is_untranslated(ex)]
        dropped += len(exs) - len(kept)
        splits[name] = kept
    spec = TaskSpec(f"pawsx-{lang}", "pair", PAWSX_LABELS, "accuracy",
                    ("sentence1", "sentence2"))
    notes = (_split_note(lang, "PAWS-X", len(examples)) + f" {dropped} rows whose translation "
             f"is {UNTRANSLATED!r} (not translated) were dropped after splitting.")
    return TaskData(spec, splits, dropped=dropped, notes=notes)  # type: ignore[arg-type]
