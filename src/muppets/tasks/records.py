"""Tag, span and choice tasks as records: JSON Lines, csv/tsv, parquet, Arrow and
``datasets.save_to_disk`` directories, in the layouts of Hugging Face datasets.

One record is one example; its fields are found by the columns of :data:`~muppets.tasks.table.ROLES`
(defaults below, others named by ``columns`` / ``task.columns``), as for classify tasks:

=======  ====================================================  =======================================
kind     a record (default column names)                       as in
=======  ====================================================  =======================================
tag      ``tokens``: the words, ``tags``: one tag per word     conll2003 (``tags=ner_tags``)
span     ``question``, ``context``, ``answers``:               squad; squad_v2 (empty lists: no
         ``{"text": [...], "answer_start": [...]}``            answer)
         (or ``[{"text", "answer_start"}, …]``), ``title``
choice   ``context``, ``endings``: a list, ``label``: the      hellaswag (``context=ctx``); swag
         index of the right ending                             (``endings=[ending0, …, ending3]``)
=======  ====================================================  =======================================

``id`` is read when there is one (else ``<file stem>-<row>``). Tags are names (``B-PER``;
IOB1 is turned into BIO as for CoNLL files) or integer ids: their names come from the
``datasets.ClassLabel`` feature the file was saved with (parquet, Arrow and save_to_disk carry
it), else from ``labels`` (``task.labels``, in id order). In csv/tsv cells a list is a JSON array
(``["EU", "rejects"]``) or, for tokens and tags, words separated by spaces; answers are JSON.

Every problem is a :class:`~muppets.errors.DataError` naming the file, the line (the row of a
columnar file) and the value.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from muppets.errors import DataError
from muppets.tasks.conll import check_tag, iob1_to_bio
from muppets.tasks.source import Problems, Record, iter_records, short
from muppets.tasks.spec import ChoiceExample, SpanExample, TagExample
from muppets.tasks.squad import check_answers
from muppets.tasks.table import Columns, Layout, cell, check_width, has, resolve_layout, row_id, text_cell, unique_ids

__all__ = ["read_tag_records", "read_span_records", "read_choice_records"]

Build = Callable[[Record, Layout, Path, int], Any]  # (record, layout, file, row) -> example


def _read(path: str | Path, fmt: str, columns: Columns, problems: Problems, build: Build) -> list[Any]:
    path = Path(path)
    records = iter_records(path, fmt, problems)
    layout = resolve_layout(records, columns, True, path, fmt)
    examples = []
    for row, record in enumerate(records, start=1):
        try:
            if record.error is not None:
                raise record.error
            check_width(record, layout, path)
            examples.append(build(record, layout, path, row))
        except DataError as err:
            problems.report(err)
    if not examples:
        raise DataError("no examples could be read", path=path)
    return unique_ids(examples)


def _list(record: Record, value: Any, role: str, path: Path, words: bool) -> list:
    """A list field: a list (jsonl, columnar) or a csv/tsv cell holding a JSON array (or, with
    ``words``, items separated by white space)."""
    line = record.line
    if isinstance(value, str) and isinstance(record.cells, list):  # a csv/tsv cell
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                raise DataError(f"{role}: a cell starting with '[' must be a JSON array", path=path, line=line,
                                value=short(text)) from None
        elif words:
            value = text.split()
    if not isinstance(value, list):
        raise DataError(f"{role} must be a list", path=path, line=line, value=short(value))
    return value


def _strings(record: Record, value: Any, role: str, path: Path, words: bool = False) -> list[str]:
    line = record.line
    items = _list(record, value, role, path, words)
    bad = next((x for x in items if not isinstance(x, str) or not x.strip()), None) if items else None
    if not items or bad is not None:
        raise DataError(f"{role} must be a non-empty list of non-empty strings", path=path, line=line,
                        value=short(bad if items else value))
    return items


# ----------------------------------------------------------------------------- tag


def _tag_names(raws: list, names: Sequence[str] | None, path: Path, line: int) -> list[str]:
    """Tags as names: names as they are, integer ids through ``names``."""
    out = []
    for raw in raws:
        if isinstance(raw, int) and not isinstance(raw, bool):
            if names is None:
                raise DataError("tags are integer ids: give their names in id order (task.labels), or read the "
                                "datasets file saved with its ClassLabel feature", path=path, line=line, value=raw)
            if not 0 <= raw < len(names):
                raise DataError(f"tag id out of range 0-{len(names) - 1} (names: {list(names)})", path=path,
                                line=line, value=raw)
            raw = names[raw]
        if not isinstance(raw, str):
            raise DataError("a tag must be a name or an integer id", path=path, line=line, value=short(raw))
        out.append(raw)
    return out


def read_tag_records(path: str | Path, fmt: str, columns: Columns, problems: Problems,
                     labels: Sequence[str] | None = None) -> list[TagExample]:
    """Sentences of one file: tokens and (when ``columns.tags``) one BIO tag per token.
    ``labels`` names integer tag ids when the file has no ClassLabel names, and, when given, is
    the only tags allowed."""
    types = sorted({t[2:] for t in labels if t != "O"}) if labels is not None else None

    def build(record: Record, layout: Layout, file: Path, row: int) -> TagExample:
        tokens = _strings(record, cell(record, layout, "tokens", file), "tokens", file, words=True)
        tags = None
        if "tags" in layout.where:
            raws = _list(record, cell(record, layout, "tags", file), "tags", file, words=True)
            if len(raws) != len(tokens):
                raise DataError(f"{len(raws)} tags for {len(tokens)} tokens", path=file, line=record.line,
                                value=short(raws))
            names = _tag_names(raws, layout.names_of("tags") or labels, file, record.line)
            tags = iob1_to_bio([check_tag(t, types, file, record.line) for t in names])
        return TagExample(row_id(record, layout, file, row), [str(t) for t in tokens], tags, f"{file}:{record.line}")

    return _read(path, fmt, columns, problems, build)


# ----------------------------------------------------------------------------- span


def _answer_list(record: Record, value: Any, path: Path) -> list:
    """``{"text": [...], "answer_start": [...]}`` (datasets' squad) or ``[{"text", "answer_start"}]``
    (a SQuAD file's), JSON in a csv cell, as ``[{"text", "answer_start"}, …]``."""
    line = record.line
    if isinstance(value, str) and isinstance(record.cells, list):  # a csv/tsv cell
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise DataError("answers is not JSON", path=path, line=line, value=short(value)) from None
    if isinstance(value, dict) and isinstance(value.get("text"), list) and isinstance(value.get("answer_start"), list):
        texts, starts = value["text"], value["answer_start"]
        if len(texts) != len(starts):
            raise DataError(f"answers: {len(texts)} texts, {len(starts)} answer_start values", path=path, line=line,
                            value=short(value))
        return [{"text": t, "answer_start": s} for t, s in zip(texts, starts)]
    if isinstance(value, list):
        return value
    raise DataError('answers must be {"text": [...], "answer_start": [...]} or a list of {"text", "answer_start"}',
                    path=path, line=line, value=short(value))


def read_span_records(path: str | Path, fmt: str, columns: Columns, problems: Problems) -> list[SpanExample]:
    """Questions of one file, each answer checked against its context (as SQuAD files are);
    empty answer lists are questions without an answer (datasets' squad_v2)."""

    def build(record: Record, layout: Layout, file: Path, row: int) -> SpanExample:
        ident = row_id(record, layout, file, row)
        question = text_cell(record, layout, "question", file)
        context = cell(record, layout, "context", file)
        if not isinstance(context, str) or not context.strip():
            raise DataError("context must be a non-empty string", path=file, line=record.line, value=short(context))
        raws = _answer_list(record, cell(record, layout, "answers", file), file)
        answers = check_answers(ident, raws, context, file, record.line, impossible=True)
        title = str(cell(record, layout, "title", file) or "") if has(record, layout, "title") else ""
        return SpanExample(ident, question, context, answers, title, f"{file}:{record.line}")

    return _read(path, fmt, columns, problems, build)


# ----------------------------------------------------------------------------- choice


def _gold(value: Any, n_endings: int, path: Path, line: int) -> int:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise DataError("label must be the index of the right ending", path=path, line=line, value=short(value))
    if not 0 <= value < n_endings:
        raise DataError(f"label out of range 0-{n_endings - 1}", path=path, line=line, value=value)
    return value


def read_choice_records(path: str | Path, fmt: str, columns: Columns, problems: Problems) -> list[ChoiceExample]:
    """Items of one file: a context, its endings (one list, or a column each) and the index of
    the right one (an integer or its digits)."""

    def build(record: Record, layout: Layout, file: Path, row: int) -> ChoiceExample:
        context = text_cell(record, layout, "context", file)
        if "endings" in layout.where:
            endings = [e.strip() for e in _strings(record, cell(record, layout, "endings", file), "endings", file)]
        else:
            endings = [text_cell(record, layout, role, file) for role in layout.where if role.startswith("endings:")]
        label = _gold(cell(record, layout, "label", file), len(endings), file, record.line) \
            if "label" in layout.where else None
        return ChoiceExample(row_id(record, layout, file, row), context, endings, label, f"{file}:{record.line}")

    return _read(path, fmt, columns, problems, build)
