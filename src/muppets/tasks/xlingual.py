"""Cross-lingual sentence-pair tasks: XNLI and PAWS-X dev, one task per language (README §9–10).

``xnli-<lang>`` reads ``xnli/dev-<lang>.tsv`` (no header; premise, hypothesis, label string;
CRLF; no quoting) and ``pawsx-<lang>`` reads ``paws-x/dev-<lang>.tsv`` (no header; sentence1,
sentence2, 0/1; CRLF; CSV quoting where a field contains ``"``).

Only labelled dev files exist, so each is split 80/20 into ``train`` / ``dev`` by
:func:`~muppets.tasks.splits.hash_split` **by sentence group**: rows that share a sentence (XNLI
gives each premise three hypotheses, one per label; PAWS-X pairs reuse a sentence, and rows
linked through shared sentences are one group) go whole to one side, ranked by their row
numbers (about 498 XNLI and 400 PAWS-X dev rows, within half a group). A sentence links rows
when it is shared in any of the staged languages' files (:data:`GROUP_LANGUAGES`; near-duplicate
English sentences can have one translation), so the groups are the same in every language, row i
lands on the same side in every language, and no sentence of a ``dev`` row (premise, hypothesis,
either PAWS-X sentence) occurs in ``train`` of any staged language: train on ``xnli-en`` ``train``
and evaluate zero-shot on ``xnli-de`` ``dev`` without leakage (``tests/test_tasks.py`` checks it
on the staged files). A data folder holding none of those files groups a language by its own
sentences (logged). Each example's ``meta["group"]`` names its group (its smallest row), so a
model-selection slice carved from ``train`` (:mod:`muppets.transfer.selection`) keeps the
groups whole too.

PAWS-X rows whose translation is the literal ``NS`` (not translated) are dropped after the
split and counted in :attr:`TaskData.dropped` (de 68, es 38, zh 16, fr 8, en 0).
"""

from __future__ import annotations

import logging
from pathlib import Path

from muppets.errors import ConfigError
from muppets.tasks.source import Problems
from muppets.tasks.spec import TaskData, TaskSpec, TextExample
from muppets.tasks.splits import connected_groups, hash_split
from muppets.tasks.table import Columns, LabelRule, read_text_file

__all__ = ["XNLI_LABELS", "XLINGUAL_DEV_FRACTION", "row_groups", "load_xnli", "load_pawsx"]

XNLI_LABELS = ["entailment", "neutral", "contradiction"]
PAWSX_LABELS = ["0", "1"]  # 1 = paraphrase
PAWSX_NAMES = ("not_paraphrase", "paraphrase")
XLINGUAL_DEV_FRACTION = 0.2
UNTRANSLATED = "NS"
GROUP_LANGUAGES = ("en", "de", "fr", "es", "zh")  # staged files: rows sharing a sentence in any are one group
_COLUMNS = Columns(text=0, text_b=1, label=2)
_FORMATS = {"xnli": ("tsv", XNLI_LABELS), "paws-x": ("tsv-quoted", PAWSX_LABELS)}  # folder -> file format, labels

log = logging.getLogger(__name__)


def _row_key(example: TextExample) -> str:
    return example.id.rsplit("-", 1)[1]  # ids are "<stem>-<row>": the row number


def _dev_file(root: Path, folder: str, lang: str) -> Path:
    path = root / folder / f"dev-{lang}.tsv"
    if not path.is_file():
        have = sorted(p.stem[4:] for p in (root / folder).glob("dev-*.tsv"))
        raise ConfigError(f"no {folder} file for language {lang!r} ({path}); "
                          f"languages available: {have}")
    return path


def _read(root: Path, folder: str, lang: str, problems: Problems) -> list[TextExample]:
    fmt, labels = _FORMATS[folder]
    return read_text_file(_dev_file(root, folder, lang), fmt, _COLUMNS, LabelRule("pair", labels), problems,
                          header=False, width=3)


def _sentences(lang: str, example: TextExample) -> list[tuple[str, str]]:
    """The example's sentences as group keys; untranslated (``NS``) and empty ones link nothing."""
    return [(lang, t) for t in (example.text, example.text_b) if t and t != UNTRANSLATED]


def row_groups(files: dict[str, list[TextExample]]) -> dict[str, str]:
    """Row number -> its group: the smallest row number of the rows linked to it by a sentence
    they share in one of the languages' ``files`` (language -> examples), directly or through
    other rows."""
    keys: dict[str, list[tuple[str, str]]] = {}
    for lang, examples in files.items():
        for ex in examples:
            keys.setdefault(_row_key(ex), []).extend(_sentences(lang, ex))
    rows = sorted(keys, key=int)
    found = connected_groups([keys[row] for row in rows])
    return {row: rows[first] for row, first in zip(rows, found)}


def _groups(root: Path, folder: str, lang: str, examples: list[TextExample]) -> dict[str, str]:
    """The row groups of the :data:`GROUP_LANGUAGES` files in ``root`` (the same for every
    language); this language's own sentences where none of them is there."""
    files = {other: examples if other == lang else _read(root, folder, other, Problems("skip"))
             for other in GROUP_LANGUAGES if (root / folder / f"dev-{other}.tsv").is_file()}
    if not files:
        log.warning("%s: none of %s to group the rows by; grouped by the %s sentences alone", folder,
                    [f"dev-{other}.tsv" for other in GROUP_LANGUAGES], lang)
        files = {lang: examples}
    return row_groups(files)


def _split(examples: list[TextExample], groups: dict[str, str]) -> dict[str, list[TextExample]]:
    rows = [_row_key(ex) for ex in examples]
    group = [groups.get(row, row) for row in rows]  # a row the grouping file lacks: its own group
    for ex, g in zip(examples, group):
        ex.meta = {**ex.meta, "group": g}
    train, dev = hash_split(examples, rows, XLINGUAL_DEV_FRACTION, groups=group)
    return {"train": train, "dev": dev}


def _split_note(lang: str, name: str, splits: dict[str, list[TextExample]]) -> str:
    total = sum(map(len, splits.values()))
    return (f"{name} has no labelled train/test here: dev-{lang}.tsv ({total} rows) is split "
            f"{len(splits['train'])}/{len(splits['dev'])} into train/dev by hash_split on the row "
            "number, rows sharing a sentence (in any staged language) on one side, the same rows in "
            "every language.")


def load_xnli(root: Path, problems: Problems, lang: str) -> TaskData:
    """XNLI dev in ``lang`` (2,490 pairs, 830 per label), split about 80/20 into train / dev by premise."""
    examples = _read(root, "xnli", lang, problems)
    splits = _split(examples, _groups(root, "xnli", lang, examples))
    spec = TaskSpec(f"xnli-{lang}", "pair", XNLI_LABELS, "accuracy", ("premise", "hypothesis"))
    return TaskData(spec, splits, notes=_split_note(lang, "XNLI", splits))


def _is_untranslated(example: TextExample) -> bool:
    return UNTRANSLATED in (example.text, example.text_b)


def load_pawsx(root: Path, problems: Problems, lang: str) -> TaskData:
    """PAWS-X dev in ``lang`` (2,000 pairs), split about 80/20 by sentence group, untranslated ``NS`` rows dropped."""
    examples = _read(root, "paws-x", lang, problems)
    splits = _split(examples, _groups(root, "paws-x", lang, examples))
    note = _split_note(lang, "PAWS-X", splits)
    dropped = 0
    for name, exs in splits.items():
        kept = [ex for ex in exs if not _is_untranslated(ex)]
        dropped += len(exs) - len(kept)
        splits[name] = kept
    spec = TaskSpec(f"pawsx-{lang}", "pair", PAWSX_LABELS, "accuracy",
                    ("sentence1", "sentence2"), PAWSX_NAMES)
    notes = (note + f" {dropped} rows whose translation "
             f"is {UNTRANSLATED!r} (not translated) were dropped after splitting.")
    return TaskData(spec, splits, dropped=dropped, notes=notes)  # type: ignore[arg-type]
