"""Text tasks stored as tables: csv, tsv, jsonl — yours, or the shared GLUE-style files.

:func:`read_table` turns a user's own file(s) into a task with no code::

    data = read_table({"train": "train.csv", "dev": "dev.csv"}, "pair",
                      columns={"text": "premise", "text_b": "hypothesis", "label": "gold"})

Columns are named by the header row (csv/tsv), by the keys (jsonl) or by the schema (parquet,
Arrow, save_to_disk: ``fmt="columnar"``); with ``header=False`` they are 0-based positions.
:class:`Columns` holds the columns of every task kind (:data:`ROLES`, defaults
:data:`DEFAULT_COLUMNS`; the tag, span and choice records are read by
:mod:`muppets.tasks.records`), and a label column saved as a ``datasets.ClassLabel`` gives its
names to the integer ids. A column asked for that is not there is an error naming the file, the
columns there are and the option that names it. Every row is checked: the column count (the header's, or the first
row's), a non-empty text, a label from the label set (``labels``, or the set seen in the files
when ``labels`` is None) or, for ``regress``, a finite number. Problems raise
:class:`~muppets.errors.DataError` naming file, line and value (``errors="strict"``) or are
skipped and counted (``errors="skip"``).

:func:`read_text_file` is the same reader for one file, used by the shared-dataset readers;
:func:`write_table` writes a task split back as such a file (``muppets data task-split``).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from muppets.config import atomic_path
from muppets.data.formats import (class_label_names, column_names, container_of, dataset_dict_splits, iter_byte_lines,
                                  json_layout, text_suffix)
from muppets.errors import ConfigError, DataError
from muppets.tasks.source import Problems, Record, iter_records, short
from muppets.tasks.spec import TaskData, TaskSpec, TextExample

log = logging.getLogger(__name__)

__all__ = ["ROLES", "DEFAULT_COLUMNS", "Columns", "Layout", "LabelRule", "read_text_file", "read_table", "write_table",
           "natural_sorted", "table_format", "task_format", "resolve_layout", "cell", "text_cell", "has", "present",
           "check_width", "row_id", "unique_ids", "file_format"]

Column = str | int
_TEXT_KINDS = ("classify", "pair", "regress")
_DEFAULT_METRIC = {"classify": "accuracy", "pair": "accuracy", "regress": "pearson_spearman"}


# kind -> the roles its columns fill (task.columns / ``columns=``), and the column names taken
# when a role is not named. A role named None has no column (e.g. ``{"label": None}``: unlabelled).
ROLES = {
    "classify": ("text", "label", "id", "meta", "probs"),
    "pair": ("text", "text_b", "label", "id", "meta", "probs"),
    "regress": ("text", "text_b", "label", "id", "meta", "probs"),
    "tag": ("tokens", "tags", "id"),
    "span": ("question", "context", "answers", "id", "title"),
    "choice": ("context", "endings", "label", "id"),
}
DEFAULT_COLUMNS: dict[str, dict[str, Column]] = {
    "classify": {"text": "text", "label": "label", "probs": "probs"},
    "pair": {"text": "text", "text_b": "text_b", "label": "label", "probs": "probs"},
    "regress": {"text": "text", "text_b": "text_b", "label": "label", "probs": "probs"},
    "tag": {"tokens": "tokens", "tags": "tags", "id": "id"},
    "span": {"question": "question", "context": "context", "answers": "answers", "id": "id", "title": "title"},
    "choice": {"context": "context", "endings": "endings", "label": "label", "id": "id"},
}
_REQUIRED = {"classify": ("text",), "pair": ("text", "text_b"), "regress": ("text",), "tag": ("tokens",),
             "span": ("question", "context", "answers"), "choice": ("context", "endings")}
_MAY_BE_ABSENT = ("probs", "id", "title", "text_b")  # a default column of these roles a file may lack


@dataclass(frozen=True)
class Columns:
    """Where each field is: a header name / jsonl key / columnar column, or a 0-based position.
    Which fields a task kind reads: :data:`ROLES`."""

    text: Column | None = None  # classify / pair / regress: the text
    text_b: Column | None = None  # pair (regress: optional): the second text
    label: Column | None = None  # None: unlabelled file (choice: the index of the right ending)
    id: Column | None = None  # None: ids are "<file stem>-<row number>"
    meta: tuple[Column, ...] = ()  # extra columns kept in ``TextExample.meta`` under their name
    probs: Column | None = None  # a probability per label (weak labels); a file or row without it has none
    tokens: Column | None = None  # tag: the words of a sentence (a list)
    tags: Column | None = None  # tag: one tag per word (names, or integer ids); None: unlabelled
    question: Column | None = None  # span: the question
    context: Column | None = None  # span: the passage answers are found in; choice: the context
    answers: Column | None = None  # span: {"text": [...], "answer_start": [...]} or [{"text", "answer_start"}, …]
    title: Column | None = None  # span: the article title
    endings: Column | tuple[Column, ...] | None = None  # choice: one list column, or one column per ending
    optional: frozenset[str] = frozenset({"probs"})  # roles whose column a file (or row) may lack

    @classmethod
    def of(cls, columns: Mapping[str, Any] | Columns) -> Columns:
        """Build from a dict such as ``{"text": "sentence", "label": "label"}`` (a text task's)."""
        if isinstance(columns, Columns):
            return columns
        unknown = set(columns) - set(ROLES["pair"])
        if unknown or "text" not in columns:
            raise ConfigError(f"columns needs 'text' and may have 'text_b', 'label', 'id', "
                              f"'meta', 'probs'; got {sorted(columns)}")
        return cls._build(dict(columns), frozenset({"probs"}))

    @classmethod
    def for_kind(cls, kind: str, given: Mapping[str, Any] | Columns | None = None) -> Columns:
        """The columns of a ``kind`` task: :data:`DEFAULT_COLUMNS`, each role ``given`` names
        replaced (None: no such column). A default id, title, probs or regress text_b column may
        be missing from a file; one you name may not."""
        if isinstance(given, Columns):
            return given
        given = dict(given or {})
        unknown = sorted(set(given) - set(ROLES[kind]))
        if unknown:
            raise ConfigError(f"columns {unknown}: a {kind} task's columns are {list(ROLES[kind])}", key="task.columns")
        merged = {role: col for role, col in {**DEFAULT_COLUMNS[kind], **given}.items() if col is not None}
        missing = [role for role in _REQUIRED[kind] if role not in merged]
        if missing:
            raise ConfigError(f"columns: a {kind} task needs a column for {missing}", key="task.columns")
        optional = {role for role in merged if role in _MAY_BE_ABSENT and role not in given}
        if kind == "pair":
            optional.discard("text_b")
        return cls._build(merged, frozenset(optional))

    @classmethod
    def _build(cls, columns: dict[str, Any], optional: frozenset[str]) -> Columns:
        for role in ("meta", "endings"):
            value = columns.get(role)
            if isinstance(value, (list, tuple)):
                columns[role] = tuple(value)
        meta = columns.get("meta") or ()
        columns["meta"] = (meta,) if isinstance(meta, (str, int)) else meta
        return cls(**columns, optional=optional)

    def roles(self) -> dict[str, Column]:
        """Role -> column for the single columns, plus ``"meta:<column>"`` for each extra one
        and ``"endings:<k>"`` for each ending column."""
        roles = {k: v for k, v in vars(self).items() if k not in ("meta", "endings", "optional") and v is not None}
        roles.update({f"meta:{col}": col for col in self.meta})
        if isinstance(self.endings, tuple):
            roles.update({f"endings:{k}": col for k, col in enumerate(self.endings)})
        elif self.endings is not None:
            roles["endings"] = self.endings
        return roles


@dataclass
class LabelRule:
    """How a raw label cell becomes a label: a float (regress) or a string of ``labels``."""

    kind: str
    labels: list[str] | None = None  # allowed labels (after mapping); None: any, inferred
    label_map: dict[str, str] = field(default_factory=dict)  # raw value -> label name

    def parse(self, raw: Any, path: Path, line: int) -> str | float:
        """Return the label of ``raw`` or raise a DataError naming ``path:line``."""
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            raise DataError("missing label", path=path, line=line)
        if self.kind == "regress":
            return _parse_score(raw, path, line)
        if isinstance(raw, (list, dict)):
            raise DataError("a label must be a string or a number", path=path, line=line,
                            value=short(raw))
        value = str(int(raw)) if isinstance(raw, bool) else str(raw).strip()
        if self.label_map:
            if value not in self.label_map:
                raise DataError(f"unknown label (expected one of {sorted(self.label_map)})",
                                path=path, line=line, value=value)
            value = self.label_map[value]
        if self.labels is not None and value not in self.labels:
            raise DataError(f"unknown label (expected one of {self.labels})",
                            path=path, line=line, value=value)
        return value


def _parse_score(raw: Any, path: Path, line: int) -> float:
    try:
        score = float(raw)
    except (TypeError, ValueError):
        raise DataError("score is not a number", path=path, line=line, value=raw) from None
    if not math.isfinite(score):
        raise DataError("score is not a finite number", path=path, line=line, value=raw)
    return score


@dataclass
class Layout:
    """Resolved columns of one file: positions (csv/tsv) or keys (jsonl, columnar), the row
    width, the roles a row may lack, and the ``datasets.ClassLabel`` names of its columns."""

    where: dict[str, Column]
    width: int | None  # expected cells per row; None for jsonl / columnar
    optional: frozenset[str] = frozenset()
    class_names: dict[str, list[str]] = field(default_factory=dict)  # column -> names (columnar files)

    def names_of(self, role: str) -> list[str] | None:
        """The ClassLabel names of ``role``'s column (None: not a ClassLabel column)."""
        return self.class_names.get(str(self.where.get(role)))


def _hint(role: str, what: str = "column") -> str:
    role = role.split(":")[0]
    return f"name the {role} {what}: task.columns={{{role}: NAME}}"


def _header_hint(names: list[str], role: str) -> str:
    """More to say about a header without the column: it is one cell holding another delimiter,
    or the file looks like CoNLL columns."""
    if len(names) == 1 and (delimiter := next((d for d in (",", "\t", ";") if d in names[0]), None)):
        return f"; the header is one cell holding {delimiter!r}: is the delimiter another? set task.format"
    if role == "tokens":
        return "; CoNLL columns (a token a line, no header): task.format conll"
    return ""


def resolve_layout(records: Any, columns: Columns, header: bool, path: Path, fmt: str) -> Layout:
    """Read the header (csv/tsv with ``header``) or the schema (columnar) and map every role to
    a position or key; a column asked for that is not there is a DataError naming the file, the
    column and the columns there are (a column of ``columns.optional`` is left out)."""
    roles, optional = columns.roles(), columns.optional
    if fmt == "columnar":
        names = column_names(path)
        missing = [(r, c) for r, c in roles.items() if c not in names and r not in optional]
        if missing:
            role, col = missing[0]
            raise DataError(f"no column {col!r} for {role} (columns: {names}; {_hint(role)})", path=path, value=col)
        return Layout({r: c for r, c in roles.items() if c in names}, None, optional, class_label_names(path))
    if fmt == "jsonl":
        return Layout(roles, None, optional)
    if not header:
        bad = {r: c for r, c in roles.items() if not isinstance(c, int)}
        if bad:
            raise ConfigError(f"{path}: without a header, columns must be positions: {bad}")
        return Layout(roles, None)  # width: taken from the first row
    first = next(records, None)
    if first is None:
        raise DataError("file has no header row", path=path)
    names = [cell.strip() for cell in first.cells]
    where: dict[str, Column] = {}
    for role, col in roles.items():
        if isinstance(col, int):
            where[role] = col
        elif col in names:
            where[role] = names.index(col)
        elif role not in optional:  # optional: e.g. probs, in gold dev/test files beside a weakly labelled train file
            hint = _hint(role) + _header_hint(names, role)
            raise DataError(f"no column {col!r} for {role} in the header {names} ({hint})", path=path,
                            line=first.line, value=col)
    return Layout(where, len(names), optional)


def has(record: Record, layout: Layout, role: str) -> bool:
    """Whether ``role`` has a column and, if the role is optional, this row a value for it."""
    if role not in layout.where:
        return False
    return role not in layout.optional or present(record, layout, role)


def cell(record: Record, layout: Layout, role: str, path: Path) -> Any:
    """The raw value of ``role`` in ``record`` (a jsonl record without the key: a DataError)."""
    where = layout.where[role]
    cells = record.cells
    if isinstance(cells, dict):
        if where not in cells:
            raise DataError(f"missing key {where!r} for {role} ({_hint(role, 'key')})",
                            path=path, line=record.line, value=short(cells))
        return cells[where]
    return cells[where]  # width was checked


def text_cell(record: Record, layout: Layout, role: str, path: Path) -> str:
    """``role``'s value: a non-empty string, stripped."""
    value = cell(record, layout, role, path)
    if not isinstance(value, str):
        raise DataError(f"{role} must be a string", path=path, line=record.line, value=short(value))
    value = value.strip()
    if not value:
        raise DataError(f"empty {role} (column {layout.where[role]!r})", path=path,
                        line=record.line)
    return value


def check_width(record: Record, layout: Layout, path: Path) -> None:
    """A csv/tsv row has the header's (or the first row's) number of cells."""
    if isinstance(record.cells, dict):
        return
    if layout.width is None:
        layout.width = len(record.cells)
        if max(layout.where.values()) >= layout.width:  # type: ignore[type-var]
            raise DataError(f"row has {layout.width} columns, fewer than the columns asked for "
                            f"{layout.where}", path=path, line=record.line)
    if len(record.cells) != layout.width:
        raise DataError(f"expected {layout.width} columns, found {len(record.cells)}",
                        path=path, line=record.line, value=short("\t".join(record.cells)))


def row_id(record: Record, layout: Layout, path: Path, row: int) -> str:
    """The row's id column, or ``<file stem>-<row>``."""
    return str(cell(record, layout, "id", path)).strip() if has(record, layout, "id") else f"{path.stem}-{row}"


def _example(record: Record, layout: Layout, rule: LabelRule, path: Path,
             row: int) -> TextExample:
    if record.error is not None:
        raise record.error
    check_width(record, layout, path)
    text = text_cell(record, layout, "text", path)
    text_b = text_cell(record, layout, "text_b", path) if has(record, layout, "text_b") else None
    probs = None
    if has(record, layout, "probs"):
        probs = _parse_probs(cell(record, layout, "probs", path), path, record.line)
    label = None
    if "label" in layout.where and (probs is None or present(record, layout, "label")):
        label = rule.parse(cell(record, layout, "label", path), path, record.line)  # with probs it may be left out
    meta = {role[5:]: str(cell(record, layout, role, path)) for role in layout.where
            if role.startswith("meta:")}
    return TextExample(row_id(record, layout, path, row), text, text_b, label, f"{path}:{record.line}", meta,
                       probs)  # type: ignore[arg-type]


def present(record: Record, layout: Layout, role: str) -> bool:
    """Whether the row has a value for the role: a jsonl key that is there and not null, a
    csv/tsv cell that is not blank."""
    cells = record.cells
    value = cells.get(layout.where[role]) if isinstance(cells, dict) else cells[layout.where[role]]
    return value is not None and not (isinstance(value, str) and not value.strip())


def _parse_probs(raw: Any, path: Path, line: int) -> dict[str, float] | list[float]:
    """A probability per label: a list (in the label set's order) or ``{label: p}``, as JSON
    or a JSON string (csv/tsv cells). Non-negative, finite, summing to 1 (within 1e-3; then
    renormalised). The list form is resolved against the label set by :func:`_order_probs`."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raise DataError("probs is not JSON", path=path, line=line, value=short(raw)) from None
    values = list(raw.values()) if isinstance(raw, dict) else raw
    if not isinstance(values, list) or not values or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 for v in values):
        raise DataError("probs must be a list or {label: probability} of non-negative numbers", path=path,
                        line=line, value=short(raw))
    total = float(sum(values))
    if abs(total - 1.0) > 1e-3:
        raise DataError(f"probs sum to {total:.4f}, not 1", path=path, line=line, value=short(raw))
    if isinstance(raw, dict):
        return {str(k).strip(): float(v) / total for k, v in raw.items()}
    return [float(v) / total for v in values]


def _order_probs(splits: Mapping[str, list[TextExample]], labels: list[str]) -> None:
    """Turn every training example's parsed probs into a tuple in ``labels`` order; one with
    probs and no label takes the most likely one (so selection can stratify on it). Outside
    ``train`` probs are dropped: a model must not be chosen or scored on a label model's
    output, so such a row counts as unlabelled unless it has a gold label (logged)."""
    for split, examples in splits.items():
        if split != "train":
            dropped = [ex for ex in examples if ex.probs is not None]
            for ex in dropped:
                ex.probs = None
            if dropped:
                log.warning("%s: probs ignored on %d %s examples (weak labels train; %s is scored on gold "
                            "labels only, %d of these have none)", dropped[0].source, len(dropped), split,
                            split, sum(ex.label is None for ex in dropped))
            continue
        for ex in examples:
            raw: Any = ex.probs
            if raw is None:
                continue
            if isinstance(raw, dict):
                unknown = sorted(set(raw) - set(labels))
                if unknown:
                    raise DataError(f"probs name labels outside the label set {labels}", path=ex.source,
                                    value=unknown)
                ex.probs = tuple(raw.get(name, 0.0) for name in labels)
            else:
                if len(raw) != len(labels):
                    raise DataError(f"{len(raw)} probs for {len(labels)} labels {labels}", path=ex.source,
                                    value=short(raw))
                ex.probs = tuple(raw)
            if ex.label is None:
                ex.label = labels[max(range(len(labels)), key=lambda i: ex.probs[i])]  # type: ignore[index]


def read_text_file(path: str | Path, fmt: str, columns: Columns, rule: LabelRule,
                   problems: Problems, *, header: bool = True, width: int | None = None,
                   encoding: str = "utf-8") -> list[TextExample]:
    """Read one table into :class:`TextExample` s (ids made unique; see the module docstring).

    ``width`` fixes the expected column count of a header-less file (else: the first row's).
    """
    path = Path(path)
    records = iter_records(path, fmt, problems, encoding)
    layout = resolve_layout(records, columns, header, path, fmt)
    layout.width = width if width is not None else layout.width
    names = layout.names_of("label")
    if names and rule.kind != "regress" and not rule.label_map:  # a datasets ClassLabel column: ids -> names
        rule = dataclasses.replace(rule, label_map={str(i): name for i, name in enumerate(names)})
    examples = []
    for row, record in enumerate(records, start=1):
        try:
            examples.append(_example(record, layout, rule, path, row))
        except DataError as err:
            problems.report(err)
    if not examples:
        raise DataError("no examples could be read", path=path)
    return unique_ids(examples)


def unique_ids(examples: list[TextExample]) -> list[TextExample]:
    """Suffix repeated ids with ``#2``, ``#3``… (e.g. duplicated YouTube comments)."""
    seen: Counter[str] = Counter()
    for example in examples:
        seen[example.id] += 1
        if seen[example.id] > 1:
            example.id = f"{example.id}#{seen[example.id]}"
    return examples


def natural_sorted(values: set[str]) -> list[str]:
    """Integers in numeric order first, then other strings alphabetically."""
    def key(value: str) -> tuple[int, float, str]:
        try:
            return (0, float(value), value)
        except ValueError:
            return (1, 0.0, value)
    return sorted(values, key=key)


def read_table(path: str | Path | Mapping[str, str | Path], kind: str,
               columns: Mapping[str, Column | None] | Columns, fmt: str = "csv",
               labels: list[str] | None = None, errors: str = "strict", *,
               name: str | None = None, metric: str | None = None, header: bool = True,
               encoding: str = "utf-8") -> TaskData:
    """Read your own classify / pair / regress task from csv, tsv or jsonl files.

    ``path`` is one file (split ``"train"``) or a mapping ``{split: file}``. With
    ``labels=None`` the label set is every label seen, numbers in numeric order.
    ``fmt="tsv"`` treats quotes as plain characters (GLUE style); use ``"tsv-quoted"`` for
    tab-separated files with CSV quoting; ``"columnar"`` for parquet / Arrow files and
    ``datasets.save_to_disk`` directories; ``"auto"`` takes each file's format from its content
    and extension (:func:`table_format`), e.g. a weakly labelled ``train.jsonl`` beside gold
    ``dev.csv``. Compressed files (gzip, bz2, xz, zstd) are read as their content. A ``probs`` column gives training examples a probability per label
    (soft labels, e.g. from ``muppets weak label``); files or rows without it have none.
    """
    files = dict(path) if isinstance(path, Mapping) else {"train": path}
    cols = Columns.of(columns)
    _check_kind(kind, cols)
    problems = Problems(errors)
    rule = LabelRule(kind, list(labels) if labels is not None else None)
    splits = {split: read_text_file(file, file_format(file, fmt, kind), cols, rule, problems, header=header,
                                    encoding=encoding)
              for split, file in files.items()}
    has_probs = any(ex.probs is not None for exs in splits.values() for ex in exs)
    if kind != "regress" and labels is None:
        if any(isinstance(ex.probs, list) for exs in splits.values() for ex in exs):
            raise ConfigError("probs given as lists need the label set in their order: pass labels "
                              "(task.labels), or write probs as {label: probability}")
        seen = {ex.label for exs in splits.values() for ex in exs if ex.label is not None}
        seen |= {k for exs in splits.values() for ex in exs if isinstance(ex.probs, dict) for k in ex.probs}
        labels = natural_sorted(seen)  # type: ignore[arg-type]
    if has_probs:
        if kind == "regress":
            raise ConfigError("probs (weak labels) are for classify and pair tasks, not regress")
        _order_probs(splits, list(labels or []))
    task = name or Path(next(iter(files.values()))).stem
    fields = tuple(str(c) for c in (cols.text, cols.text_b) if c is not None)
    spec = TaskSpec(task, kind, list(labels or []), metric or _DEFAULT_METRIC[kind], fields)
    problems.summarize(task)
    return TaskData(spec, splits, skipped=problems.skipped)  # type: ignore[arg-type]


def file_format(path: str | Path, fmt: str, kind: str) -> str:
    """``fmt`` for ``path``: its own (:func:`task_format`) for ``"auto"``; a format that the
    content contradicts (a text format for a parquet file, ``columnar`` for a text file) is refused."""
    if fmt == "auto":
        return task_format(path, kind)
    columnar = container_of(path) is not None
    if columnar != (fmt == "columnar"):
        found = "a parquet / Arrow file or save_to_disk directory" if columnar else "not columnar (a text file)"
        raise DataError(f"task.format {fmt}, but the file is {found} by its content: set task.format "
                        f"{'columnar' if columnar else 'to its text format'}, or leave it out", path=path)
    return fmt


def table_format(path: str | Path) -> str:
    """The format of a classify / pair / regress file: :func:`task_format`."""
    return task_format(path, "classify")


_SUFFIX_FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".tsv": "tsv", ".csv": "csv"}


def task_format(path: str | Path, kind: str) -> str:
    """The format of a ``kind`` task file by content, then by the suffix under any compression
    one: parquet / Arrow / save_to_disk → ``columnar``; ``.jsonl`` and ``.json`` holding JSON
    Lines → ``jsonl``; ``.tsv``; ``.csv``; a ``.json`` holding one JSON document → ``squad``
    (span tasks); any other suffix of a tag task → ``conll`` (CoNLL columns have no suffix of
    their own: ``eng.train``, ``x.conll``, ``x.txt``). Anything else — another suffix, a JSON
    document for another kind, JSON content given as CoNLL — is refused with the reason and
    what to set, never guessed."""
    path = Path(path)
    if container_of(path) is not None:
        return "columnar"
    if (splits := dataset_dict_splits(path)) is not None:
        raise DataError(f"a datasets DatasetDict with the splits {list(splits)}: name one split's directory as each "
                        f"task file (e.g. {next(iter(splits.values()), path / 'train')})", path=path)
    if path.is_dir():
        raise DataError("a directory, but not a datasets.save_to_disk one (no state.json): name a file, or the "
                        "directory save_to_disk wrote", path=path)
    suffix = text_suffix(path)
    if suffix == ".json" and json_layout(path) == "document":
        if kind == "span":
            return "squad"
        raise DataError(f"a .json file holding one JSON document, not JSON Lines (one record a line): a {kind} "
                        "task reads JSON Lines; name a JSON Lines file .jsonl (a SQuAD document is task.kind span)",
                        path=path)
    if suffix in _SUFFIX_FORMATS:
        return _SUFFIX_FORMATS[suffix]
    if kind == "tag":
        _refuse_json_as_conll(path)
        return "conll"
    formats = "csv, tsv, tsv-quoted, jsonl, columnar" + (", squad" if kind == "span" else "")
    raise DataError(f"cannot tell the table format from the suffix {suffix or '(none)'!r}: name the file .csv, "
                    f".tsv, .jsonl, .json (JSON Lines) or .parquet, or set task.format ({formats})", path=path)


def _refuse_json_as_conll(path: Path) -> None:
    """A tag file read as CoNLL columns whose first line is JSON is refused, not parsed as words."""
    for number, line in enumerate(iter_byte_lines(path), start=1):
        if line.strip():
            if line.lstrip()[:1] in (b"{", b"["):
                raise DataError("the first line is JSON, not CoNLL columns (a token and its tags a line): name a JSON "
                                "Lines file .jsonl, or set task.format jsonl", path=path, line=number,
                                value=short(line.decode("utf-8", "replace").strip()))
            return


def _check_kind(kind: str, columns: Columns) -> None:
    if kind not in _TEXT_KINDS:
        raise ConfigError(f"read_table reads kinds {_TEXT_KINDS}, not {kind!r} "
                          "(see read_conll for tagging and read_squad for spans)")
    if kind == "pair" and columns.text_b is None:
        raise ConfigError("kind 'pair' needs columns['text_b']")
    if kind == "classify" and columns.text_b is not None:
        raise ConfigError("two text columns make a 'pair' task, not 'classify'")


def write_table(examples: list[TextExample], kind: str, out: str | Path, overwrite: bool = False,
                name: str = "split") -> int:
    """Write labelled ``examples`` of a classify / pair / regress task as the file
    :func:`read_table` reads with its default columns: ``id,text[,text_b],label`` CSV (``.csv``)
    or one JSON object a line (``.jsonl``); atomically, an existing file only with ``overwrite``.
    ``name`` (e.g. ``spam/valid``) names the split in errors. Returns the rows written."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise ConfigError(f"{out} exists; choose another path or pass --overwrite")
    if kind not in _TEXT_KINDS:
        raise ConfigError(f"{name} is a {kind} task; only classify, pair and regress splits are written as "
                          "tables (tag, span and choice tasks keep their own formats)")
    suffix = out.suffix.lower()
    if suffix not in (".csv", ".jsonl"):
        raise ConfigError(f"{out}: write a task split as .csv or .jsonl (uncompressed)")
    unlabelled = next((ex for ex in examples if ex.label is None), None)
    if unlabelled is not None:
        raise ConfigError(f"{name}: example {unlabelled.id} ({unlabelled.source}) has no label; "
                          "only a labelled split can be written")
    fields = ["id", "text", *(["text_b"] if kind != "classify" else []), "label"]
    rows = [{"id": ex.id, "text": ex.text, "text_b": ex.text_b, "label": ex.label} for ex in examples]
    with atomic_path(out) as tmp, tmp.open("w", encoding="utf-8", newline="") as fh:
        if suffix == ".csv":
            writer = csv.DictWriter(fh, fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        else:
            fh.writelines(json.dumps({k: row[k] for k in fields}, ensure_ascii=False) + "\n" for row in rows)
    return len(rows)
