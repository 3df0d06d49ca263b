"""Text tasks stored as tables: csv, tsv, jsonl — yours, or the shared GLUE-style files.

:func:`read_table` turns a user's own file(s) into a task with no code::

    data = read_table({"train": "train.csv", "dev": "dev.csv"}, "pair",
                      columns={"text": "premise", "text_b": "hypothesis", "label": "gold"})

Columns are named by the header row (csv/tsv) or by the keys (jsonl); with ``header=False``
they are 0-based positions. Every row is checked: the column count (the header's, or the first
row's), a non-empty text, a label from the label set (``labels``, or the set seen in the files
when ``labels`` is None) or, for ``regress``, a finite number. Problems raise
:class:`~muppets.errors.DataError` naming file, line and value (``errors="strict"``) or are
skipped and counted (``errors="skip"``).

:func:`read_text_file` is the same reader for one file, used by the shared-dataset readers;
:func:`write_table` writes a task split back as such a file (``muppets data task-split``).
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from muppets.config import atomic_path
from muppets.data.formats import container_of, json_layout, text_suffix
from muppets.errors import ConfigError, DataError
from muppets.tasks.source import Problems, Record, iter_records, short
from muppets.tasks.spec import TaskData, TaskSpec, TextExample

log = logging.getLogger(__name__)

__all__ = ["Columns", "LabelRule", "read_text_file", "read_table", "write_table", "natural_sorted",
           "table_format"]

Column = str | int
_TEXT_KINDS = ("classify", "pair", "regress")
_DEFAULT_METRIC = {"classify": "accuracy", "pair": "accuracy", "regress": "pearson_spearman"}


@dataclass(frozen=True)
class Columns:
    """Where each field is: a header name / jsonl key, or a 0-based position."""

    text: Column
    text_b: Column | None = None
    label: Column | None = None  # None: unlabelled file
    id: Column | None = None  # None: ids are "<file stem>-<row number>"
    meta: tuple[Column, ...] = ()  # extra columns kept in ``TextExample.meta`` under their name
    probs: Column | None = None  # a probability per label (weak labels); a file or row without it has none

    @classmethod
    def of(cls, columns: Mapping[str, Column | None] | Columns) -> Columns:
        """Build from a dict such as ``{"text": "sentence", "label": "label"}``."""
        if isinstance(columns, Columns):
            return columns
        unknown = set(columns) - {"text", "text_b", "label", "id", "meta", "probs"}
        if unknown or "text" not in columns:
            raise ConfigError(f"columns needs 'text' and may have 'text_b', 'label', 'id', "
                              f"'meta', 'probs'; got {sorted(columns)}")
        meta = columns.get("meta") or ()
        meta = (meta,) if isinstance(meta, (str, int)) else tuple(meta)
        return cls(**{**columns, "meta": meta})  # type: ignore[arg-type]

    def roles(self) -> dict[str, Column]:
        """Role -> column for the single columns, plus ``"meta:<column>"`` for each extra one."""
        roles = {k: v for k, v in vars(self).items() if k != "meta" and v is not None}
        roles.update({f"meta:{col}": col for col in self.meta})
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
class _Layout:
    """Resolved columns of one file: positions (csv/tsv) or keys (jsonl), and the row width."""

    where: dict[str, Column]
    width: int | None  # expected cells per row; None for jsonl


def _resolve(records: Any, columns: Columns, header: bool, path: Path,
             jsonl: bool) -> _Layout:
    """Read the header (if any) and map every role to a position or key."""
    if jsonl:
        return _Layout(columns.roles(), None)
    if not header:
        bad = {r: c for r, c in columns.roles().items() if not isinstance(c, int)}
        if bad:
            raise ConfigError(f"{path}: without a header, columns must be positions: {bad}")
        return _Layout(columns.roles(), None)  # width: taken from the first row
    first = next(records, None)
    if first is None:
        raise DataError("file has no header row", path=path)
    names = [cell.strip() for cell in first.cells]
    where: dict[str, Column] = {}
    for role, col in columns.roles().items():
        if isinstance(col, int):
            where[role] = col
        elif col in names:
            where[role] = names.index(col)
        elif role == "probs":
            continue  # optional: e.g. gold dev/test files beside a weakly labelled train file
        else:
            raise DataError(f"no column {col!r} for {role} in the header {names}",
                            path=path, line=first.line, value=col)
    return _Layout(where, len(names))


def _cell(record: Record, layout: _Layout, role: str, path: Path) -> Any:
    where = layout.where[role]
    cells = record.cells
    if isinstance(cells, dict):
        if where not in cells:
            raise DataError(f"missing key {where!r}", path=path, line=record.line,
                            value=short(cells))
        return cells[where]
    return cells[where]  # width was checked


def _text(record: Record, layout: _Layout, role: str, path: Path) -> str:
    value = _cell(record, layout, role, path)
    if not isinstance(value, str):
        raise DataError(f"{role} must be a string", path=path, line=record.line, value=value)
    value = value.strip()
    if not value:
        raise DataError(f"empty {role} (column {layout.where[role]!r})", path=path,
                        line=record.line)
    return value


def _check_width(record: Record, layout: _Layout, path: Path) -> None:
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


def _example(record: Record, layout: _Layout, rule: LabelRule, path: Path,
             row: int) -> TextExample:
    if record.error is not None:
        raise record.error
    _check_width(record, layout, path)
    text = _text(record, layout, "text", path)
    text_b = _text(record, layout, "text_b", path) if "text_b" in layout.where else None
    probs = None
    if "probs" in layout.where and _present(record, layout, "probs"):
        probs = _parse_probs(_cell(record, layout, "probs", path), path, record.line)
    label = None
    if "label" in layout.where and (probs is None or _present(record, layout, "label")):
        label = rule.parse(_cell(record, layout, "label", path), path, record.line)  # with probs it may be left out
    ident = (str(_cell(record, layout, "id", path)).strip() if "id" in layout.where
             else f"{path.stem}-{row}")
    meta = {role[5:]: str(_cell(record, layout, role, path)) for role in layout.where
            if role.startswith("meta:")}
    return TextExample(ident, text, text_b, label, f"{path}:{record.line}", meta, probs)  # type: ignore[arg-type]


def _present(record: Record, layout: _Layout, role: str) -> bool:
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
    layout = _resolve(records, columns, header, path, jsonl=fmt in ("jsonl", "columnar"))
    layout.width = width if width is not None else layout.width
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
    splits = {split: read_text_file(file, _format_of(file, fmt), cols, rule, problems, header=header,
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


def _format_of(path: str | Path, fmt: str) -> str:
    return fmt if fmt != "auto" else table_format(path)


def table_format(path: str | Path) -> str:
    """The table format of ``path`` by content, then by the suffix under any compression one:
    parquet / Arrow / save_to_disk → ``columnar``; ``.jsonl`` and ``.json`` holding JSON Lines
    → ``jsonl``; ``.tsv``; ``.csv``. Anything else — another suffix, a ``.json`` holding one
    JSON document — is refused with the reason, never guessed."""
    if container_of(path) is not None:
        return "columnar"
    suffix = text_suffix(path)
    if suffix == ".json" and json_layout(path) == "document":
        raise DataError("a .json file holding one JSON document, not JSON Lines (one record a "
                        "line): a table needs JSON Lines (a SQuAD file is task.kind span)", path=path)
    known = {".jsonl": "jsonl", ".json": "jsonl", ".tsv": "tsv", ".csv": "csv"}
    if suffix not in known:
        raise DataError(f"cannot tell the table format from the suffix {suffix or '(none)'!r}: name "
                        f"the file .csv, .tsv, .jsonl, .json (JSON Lines) or .parquet, or set task.format "
                        f"(csv, tsv, tsv-quoted, jsonl, columnar)", path=path)
    return known[suffix]


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
