"""Reading task files: numbered lines and records, strict decoding, and the error policy.

Every task reader goes through :func:`iter_lines` (line-based formats) or :func:`iter_records`
(tables and jsonl), so all of them decode, number and report the same way:

* lines are split on ``\\n`` only; a trailing ``\\r`` is removed (CRLF files), and a UTF-8
  byte-order mark at the start of the file is dropped (MRPC's header has one);
* bytes that do not decode raise :class:`~muppets.errors.DataError` naming the file, the line
  and the byte offset in the file (``errors="strict"``), or mark the line bad (``"skip"``) so
  the reader drops the whole record it belongs to;
* quoted CSV fields may span lines; a record's line is the line it starts on;
* gzip / bz2 / xz / zstd files are decompressed first (found by their magic bytes), and
  parquet / Arrow files and ``datasets.save_to_disk`` directories (``fmt="columnar"``) give one
  record per row, numbered from 1: the one format layer of :mod:`muppets.data.formats`.

:class:`Problems` is the error policy of one load: ``"strict"`` raises the first problem,
``"skip"`` logs it (the first few in full) and counts it.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from muppets.config import parse_json
from muppets.data.formats import iter_rows
from muppets.data.formats import read_bytes as _decompressed
from muppets.errors import ConfigError, DataError

__all__ = ["ERROR_MODES", "TABLE_FORMATS", "Problems", "Line", "Record", "iter_lines",
           "iter_records", "short"]

logger = logging.getLogger(__name__)

ERROR_MODES = ("strict", "skip")
# fmt -> (delimiter, quoted?). "tsv" is GLUE-style: a quote character is just a character.
TABLE_FORMATS = {"csv": (",", True), "tsv": ("\t", False), "tsv-quoted": ("\t", True),
                 "jsonl": (None, False), "columnar": (None, False)}
_LOGGED_IN_FULL = 5  # skipped problems logged one by one before only counting


class Problems:
    """The error policy of one load: raise (``"strict"``) or log and count (``"skip"``)."""

    def __init__(self, errors: str = "strict") -> None:
        if errors not in ERROR_MODES:
            raise ConfigError(f"errors must be one of {ERROR_MODES}, not {errors!r}")
        self.errors = errors
        self.skipped = 0

    @property
    def strict(self) -> bool:
        return self.errors == "strict"

    def report(self, error: DataError) -> None:
        """Raise ``error`` in strict mode; otherwise count it (and log the first few)."""
        if self.strict:
            raise error
        self.skipped += 1
        if self.skipped <= _LOGGED_IN_FULL:
            logger.warning("skipped: %s", error)

    def summarize(self, task: str) -> None:
        """Log one warning with the total, if anything was skipped."""
        if self.skipped:
            logger.warning("%s: skipped %d bad record(s) (errors='skip')", task, self.skipped)


@dataclass(slots=True)
class Line:
    """One decoded line without its ending; ``error`` is set if it did not decode (skip mode)."""

    number: int  # 1-based
    text: str
    error: DataError | None = None


@dataclass(slots=True)
class Record:
    """One table row (list of cells) or jsonl object (dict), with the line it starts on."""

    line: int
    cells: list[str] | dict[str, Any]
    error: DataError | None = None  # a decoding problem inside the record (skip mode)


def short(text: object, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters for an error message."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _read_bytes(path: Path) -> bytes:
    if path.is_dir():
        raise DataError("a directory, not a file (a datasets.save_to_disk directory is read "
                        "as a table: task.format columnar)", path=path)
    data = _decompressed(path)
    if not data.strip():
        raise DataError("file is empty", path=path)
    return data


def _decode_error(path: Path, number: int, offset: int, raw: bytes,
                  exc: UnicodeDecodeError, encoding: str) -> DataError:
    name = "UTF-8" if encoding.replace("_", "-").lower() in ("utf-8", "utf8") else encoding
    return DataError(
        f"invalid {name}: byte 0x{raw[exc.start]:02x} at column {exc.start + 1} does not decode",
        path=path, line=number, position=offset + exc.start,
        value=raw[max(0, exc.start - 20): exc.start + 20])


def iter_lines(path: str | Path, problems: Problems, encoding: str = "utf-8") -> Iterator[Line]:
    """Yield the numbered, decoded lines of ``path`` (see the module docstring)."""
    path = Path(path)
    data = _read_bytes(path)
    pieces = data.split(b"\n")
    if pieces[-1] == b"":  # the file ends with a newline: no line after it
        pieces.pop()
    offset = 0
    for number, raw in enumerate(pieces, start=1):
        raw_line = raw[:-1] if raw.endswith(b"\r") else raw
        try:
            text, error = raw_line.decode(encoding), None
        except UnicodeDecodeError as exc:
            error = _decode_error(path, number, offset, raw_line, exc, encoding)
            if problems.strict:
                raise error from None
            text = raw_line.decode(encoding, errors="replace")
        if number == 1 and text.startswith("\ufeff"):
            text = text[1:]
        yield Line(number, text, error)
        offset += len(raw) + 1


class _Feed:
    """Feeds lines to ``csv.reader`` and remembers which lines the current record used."""

    def __init__(self, lines: Iterator[Line]) -> None:
        self._lines = lines
        self.numbers: list[int] = []
        self.errors: list[DataError] = []

    def __iter__(self) -> _Feed:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.numbers.append(line.number)
        if line.error is not None:
            self.errors.append(line.error)
        return line.text + "\n"

    def start(self) -> None:
        self.numbers.clear()
        self.errors.clear()


def _iter_quoted(path: Path, problems: Problems, delimiter: str,
                 encoding: str) -> Iterator[Record]:
    feed = _Feed(iter_lines(path, problems, encoding))
    reader = csv.reader(feed, delimiter=delimiter, strict=True)
    while True:
        feed.start()
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            line = feed.numbers[0] if feed.numbers else None
            message = str(err)
            if "unexpected end of data" in message:
                message = "truncated file: a quoted field is never closed"
            problems.report(DataError(f"malformed CSV: {message}", path=path, line=line))
            continue
        if cells:
            yield Record(feed.numbers[0], cells, feed.errors[0] if feed.errors else None)


def _iter_jsonl(path: Path, problems: Problems, encoding: str) -> Iterator[Record]:
    for line in iter_lines(path, problems, encoding):
        if not line.text.strip():
            continue
        try:
            obj = parse_json(line.text, path, line.number)
        except DataError as err:
            problems.report(line.error or err)
            continue
        if not isinstance(obj, dict):
            problems.report(DataError("a jsonl line must hold a JSON object", path=path,
                                      line=line.number, value=short(line.text)))
            continue
        yield Record(line.number, obj, line.error)


def iter_records(path: str | Path, fmt: str, problems: Problems,
                 encoding: str = "utf-8") -> Iterator[Record]:
    """Yield the records of a ``csv``, ``tsv`` (unquoted), ``tsv-quoted``, ``jsonl`` or
    ``columnar`` (parquet, Arrow, save_to_disk: one dict per row) file.

    Blank lines are passed over. Cells are returned as read (not stripped).
    """
    if fmt not in TABLE_FORMATS:
        raise ConfigError(f"fmt must be one of {tuple(TABLE_FORMATS)}, not {fmt!r}")
    path = Path(path)
    delimiter, quoted = TABLE_FORMATS[fmt]
    if fmt == "columnar":
        yield from (Record(row, cells) for row, cells in iter_rows(path))
    elif delimiter is None:
        yield from _iter_jsonl(path, problems, encoding)
    elif quoted:
        yield from _iter_quoted(path, problems, delimiter, encoding)
    else:
        for line in iter_lines(path, problems, encoding):
            if line.text.strip():
                yield Record(line.number, line.text.split(delimiter), line.error)
