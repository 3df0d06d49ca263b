"""Your own task files, of any kind, in any format: :func:`read_task` (``muppets finetune FILE``,
``evaluate``, ``multitask``, ``features``).

==========================  ===============================================================
kind                        formats (each file's own: :func:`~muppets.tasks.table.task_format`)
==========================  ===============================================================
classify, pair, regress     csv, tsv, JSON Lines, parquet / Arrow / save_to_disk
tag                         the same (:mod:`~muppets.tasks.records`), or CoNLL columns
span                        the same, or a SQuAD JSON document
choice                      the same
==========================  ===============================================================

any of them gzip-, bz2-, xz- or zstd-compressed. A ``DatasetDict.save_to_disk`` directory given
as the only file stands for its splits (``train``, ``validation`` as ``dev``, ``test``). The
fields are found by ``columns`` (:data:`~muppets.tasks.table.DEFAULT_COLUMNS`, each role you name
replacing the default: e.g.
``{"tags": "ner_tags"}`` for Hugging Face's conll2003); a CoNLL file has no header, so its
columns are positions (``{"tokens": 0, "tags": 3}``; by default the first and the last).

:func:`guess_kind` gives the kind when none is set, by rule, never by trying: the roles named
in ``columns``, else the file's own column names (``tokens`` → tag, ``question`` or
``answers`` → span, ``endings`` → choice, ``text_b`` → pair, else classify), a SQuAD ``.json``
document → span, ``.conll`` / ``.txt`` → tag. Names of two kinds at once are refused.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from muppets.data.formats import (column_names, container_of, dataset_dict_splits, iter_byte_lines, json_layout,
                                  text_suffix)
from muppets.errors import ConfigError, DataError
from muppets.tasks.conll import bio_labels, check_tag, read_conll_file
from muppets.tasks.records import read_choice_records, read_span_records, read_tag_records
from muppets.tasks.source import TABLE_FORMATS, Problems
from muppets.tasks.spec import KINDS, TaskData, TaskSpec
from muppets.tasks.squad import read_squad_articles, span_spec
from muppets.tasks.table import Columns, file_format, read_table

__all__ = ["TASK_FORMATS", "read_task", "guess_kind"]

TASK_FORMATS = ("auto", *TABLE_FORMATS, "conll", "squad")  # task.format
_TEXT_KINDS = ("classify", "pair", "regress")
_OWN_FORMAT = {"conll": "tag", "squad": "span"}  # formats of one kind only
_SPLIT_NAMES = {"validation": "dev", "valid": "dev"}  # a DatasetDict's split names -> ours
# roles / column names that say the kind (``context`` and ``label`` are shared, so say nothing)
_ROLE_KIND = {"tokens": "tag", "tags": "tag", "question": "span", "answers": "span", "title": "span",
              "endings": "choice", "text_b": "pair"}
_COLUMN_KIND = {"tokens": "tag", "question": "span", "answers": "span", "endings": "choice", "text_b": "pair"}


def read_task(path: str | Path | Mapping[str, str | Path], kind: str, columns: Mapping[str, Any] | None = None,
              fmt: str = "auto", labels: Sequence[str] | None = None, errors: str = "strict", *,
              name: str | None = None) -> TaskData:
    """Read your own ``kind`` task: one file (split ``"train"``) or ``{split: file}``, each in
    its own format (``fmt="auto"``) or all in ``fmt`` (see the module docstring).

    ``labels``: the label set in head order (tag: also the names of integer tag ids in id
    order; by default the BIO tags of the entity types seen). Choice labels are ``0 … n-1``
    for ``n`` endings, the same number in every item."""
    if kind not in KINDS:
        raise ConfigError(f"task.kind {kind!r}: expected one of {KINDS}", key="task.kind")
    if fmt not in TASK_FORMATS or _OWN_FORMAT.get(fmt, kind) != kind:
        raise ConfigError(f"task.format {fmt!r} does not fit a {kind} task (formats: "
                          f"{[f for f in TASK_FORMATS if _OWN_FORMAT.get(f, kind) == kind]})", key="task.format")
    if kind == "tag" and labels is not None and (bad := [label for label in labels if not _is_tag(label)]):
        raise ConfigError(f"task.labels {bad}: a tag task's labels are O, B-<type> and I-<type>", key="task.labels")
    files = _splits(dict(path) if isinstance(path, Mapping) else {"train": path})
    cols = Columns.for_kind(kind, columns)
    if kind in _TEXT_KINDS:
        return read_table(files, kind, cols, fmt, labels=list(labels) if labels is not None else None,
                          errors=errors, name=name)
    problems = Problems(errors)
    splits = {split: _read_file(Path(file), kind, fmt, cols, dict(columns or {}), labels, problems)
              for split, file in files.items()}
    task = name or Path(next(iter(files.values()))).stem
    spec = {"tag": _tag_spec, "span": _span_spec, "choice": _choice_spec}[kind](task, splits, labels)
    problems.summarize(task)
    return TaskData(spec, splits, skipped=problems.skipped)


def _splits(files: dict[str, Any]) -> dict[str, Any]:
    """A ``DatasetDict.save_to_disk`` directory given alone stands for its splits (``validation``
    read as ``dev``); elsewhere each split names its own file or directory."""
    if len(files) == 1 and (splits := dataset_dict_splits(next(iter(files.values())))) is not None:
        return {_SPLIT_NAMES.get(split, split): where for split, where in splits.items()}
    return files


def _read_file(path: Path, kind: str, fmt: str, cols: Columns, given: dict, labels: Sequence[str] | None,
               problems: Problems) -> list:
    fmt = file_format(path, fmt, kind)
    if fmt == "conll":
        token_col, tag_col = _conll_columns(path, given)
        types = sorted({t[2:] for t in labels if t != "O"}) if labels is not None else None
        return read_conll_file(path, problems, token_col=token_col, tag_col=tag_col, types=types)
    if fmt == "squad":
        return [ex for article in read_squad_articles(path, problems) for ex in article]
    if kind == "tag":
        return read_tag_records(path, fmt, cols, problems, labels)
    if kind == "span":
        return read_span_records(path, fmt, cols, problems)
    return read_choice_records(path, fmt, cols, problems)


def _conll_columns(path: Path, given: dict) -> tuple[int, int | None]:
    """``(token_col, tag_col)`` of a CoNLL file: positions in ``task.columns``, else 0 and -1."""
    names = {role: col for role, col in given.items() if col is not None and not isinstance(col, int)}
    unknown = sorted(set(given) - {"tokens", "tags"})
    if names or unknown:
        raise ConfigError(f"{path}: CoNLL columns have no header; name them by position "
                          f"(task.columns={{tokens: 0, tags: 3}}), not {names or unknown}", key="task.columns")
    tags = given.get("tags", -1)
    return int(given.get("tokens", 0)), None if tags is None else int(tags)


# ----------------------------------------------------------------------------- specs


def _tag_spec(task: str, splits: dict[str, list], labels: Sequence[str] | None) -> TaskSpec:
    if labels is not None:
        known = set(labels)
        for examples in splits.values():
            for ex in examples:
                unknown = [t for t in ex.tags or () if t not in known]
                if unknown:
                    raise DataError(f"tag not in the label set {list(labels)} (task.labels)", path=ex.source,
                                    value=unknown[0])
        return TaskSpec(task, "tag", list(labels), "entity_f1", ("tokens",))
    types = sorted({t[2:] for exs in splits.values() for ex in exs for t in ex.tags or () if t != "O"})
    if not types:
        raise ConfigError("no entity tags found; give the label set (task.labels), e.g. for unlabelled files")
    return TaskSpec(task, "tag", bio_labels(types), "entity_f1", ("tokens",))


def _is_tag(label: str) -> bool:
    try:
        check_tag(label, None, None, None)
    except DataError:
        return False
    return True


def _span_spec(task: str, splits: dict[str, list], labels: Sequence[str] | None) -> TaskSpec:
    if labels:
        raise ConfigError("a span task has no label set (task.labels)", key="task.labels")
    return span_spec(task)


def _choice_spec(task: str, splits: dict[str, list], labels: Sequence[str] | None) -> TaskSpec:
    first = next(ex for exs in splits.values() for ex in exs)
    n = len(first.endings)
    for examples in splits.values():
        for ex in examples:
            if len(ex.endings) != n:
                raise DataError(f"{len(ex.endings)} endings, but {first.source} has {n}: every item of a choice "
                                "task needs the same number", path=ex.source)
    names = [str(i) for i in range(n)]
    if labels is not None and list(labels) != names:
        raise ConfigError(f"a choice task's labels are the ending indices {names}, not {list(labels)}",
                          key="task.labels")
    return TaskSpec(task, "choice", names, "accuracy", ("context", "endings"))


# ----------------------------------------------------------------------------- the kind of a file


def _file_columns(path: Path) -> list[str] | None:
    """The column names of a table file (header, first record's keys, schema); None: not a table."""
    if container_of(path) is not None:
        return column_names(path)
    suffix = text_suffix(path)
    fmt = {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "tsv"}.get(suffix)
    if fmt is None or path.is_dir() or (suffix == ".json" and json_layout(path) == "document"):
        return None
    line = next((raw for raw in iter_byte_lines(path) if raw.strip()), b"")  # only the first lines are read
    text = line.decode("utf-8", errors="replace").lstrip("\ufeff")
    if fmt == "jsonl":
        try:
            record = json.loads(text)
        except ValueError:
            return None  # the reader names the line
        return [str(key) for key in record] if isinstance(record, dict) else None
    cells = next(csv.reader([text]), []) if fmt == "csv" else text.rstrip("\r\n").split("\t")
    return [cell.strip() for cell in cells]


def _one_kind(found: dict[str, str], where: str) -> str | None:
    kinds = sorted(set(found.values()))
    if len(kinds) > 1:
        raise ConfigError(f"{where} fit more than one task kind ({', '.join(f'{c}: {k}' for c, k in found.items())}): "
                          "set task.kind", key="task.kind")
    return kinds[0] if kinds else None


def guess_kind(path: str | Path, columns: Mapping[str, Any] | None = None) -> str:
    """The task kind of ``path`` when task.kind is not set (see the module docstring)."""
    path = Path(path)
    path = next(iter((dataset_dict_splits(path) or {"": path}).values()), path)  # a DatasetDict: its first split
    roles = sorted(columns or {})
    given = _one_kind({r: _ROLE_KIND[r] for r in roles if r in _ROLE_KIND}, f"task.columns {roles}")
    if given:
        return given
    names = _file_columns(path)
    if names is not None:
        return _one_kind({c: _COLUMN_KIND[c] for c in names if c in _COLUMN_KIND}, f"{path}: the columns {names}") \
            or "classify"
    suffix = text_suffix(path)
    if suffix == ".json" and not path.is_dir():
        return "span"  # a JSON document (JSON Lines are a table, above)
    return {".conll": "tag", ".txt": "tag"}.get(suffix, "classify")
