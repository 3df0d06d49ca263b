"""Streaming document readers: plain text, Project Gutenberg books, WikiExtractor shards, jsonl.

Every reader turns raw files into :class:`Document` objects (a source label + a list of
paragraphs) one at a time, reading files line by line so a multi-gigabyte text or jsonl file
never sits in memory. Formats (``fmt``):

``text``
    Each block of non-blank lines is one document; its lines are joined with a space into one
    paragraph (a blank line = a document break).
``lines``
    Each non-blank line is one document of one paragraph (one review snippet, tweet or sentence
    a line; never chosen by ``auto``).
``gutenberg``
    One book = one document: only the text strictly between the ``*** START OF THE PROJECT
    GUTENBERG EBOOK`` and ``*** END OF …`` lines (case-insensitive) is kept, so the licence
    header and footer are dropped; so are the transcriber credits that open most books
    (``Produced by …``, ``Transcribed from …``) and the closing ``End of the Project Gutenberg
    EBook of …`` line. Paragraphs are blank-line separated; hard-wrapped lines are joined with
    a space.
``wikiextractor``
    ``<doc id=… title=…>`` … ``</doc>``: one article = one document; the first non-blank line
    (the title) is dropped; every other non-blank line is a paragraph (headings included).
``jsonl``
    One JSON object per line, one document per object, text under ``text_field``. If the text
    contains a blank line, blank-line blocks are paragraphs (inner newlines joined with a space);
    otherwise every non-blank line is a paragraph.
``novel-wrapped`` / ``novel-lines`` / ``novel-tei``
    One file = one novel = one document, its lines rejoined into paragraphs by the layout's
    rule (hard-wrapped without paragraph marks / one paragraph per line / TEI markup breaks):
    see :mod:`muppets.data.languages` (the German, French and Spanish novels of the shared data).
``zhwiki``
    ``wikiextractor`` with the Chinese Wikipedia leftovers cleaned from every paragraph
    (:func:`muppets.data.languages.clean_zhwiki`).
``csv`` / ``tsv``
    A table with a header row; one document per row, its text in the ``text_field`` column
    (paragraphs by the jsonl rule). Quoted fields may span lines.
``columnar``
    Parquet files, Arrow IPC files and ``datasets.save_to_disk`` directories: one document per
    row, text in the ``text_field`` column, read one record batch at a time and only that column
    (:mod:`muppets.data.formats`; needs ``muppets[columnar]``). A row's source is ``path:row``.
``auto``
    Per file, by content first: parquet / Arrow / a ``save_to_disk`` directory → columnar;
    then by the suffix under any compression suffix: ``.jsonl`` or ``.json`` (JSON Lines) →
    jsonl, ``.csv`` → csv, ``.tsv`` → tsv; first non-blank line starts with ``<doc `` →
    wikiextractor; a Gutenberg START line within the first 400 lines → gutenberg; anything else
    → text.

Every text format may be gzip, bz2, xz or zstd compressed: the compression is found by the
file's magic bytes and undone under the parser (:func:`muppets.data.formats.open_stream`). A
text file holding NUL bytes is refused as binary. A new format is one entry of
:data:`CORPUS_FORMATS`: its parser, and whether it reads lines or columnar rows.

Documents without any paragraph (e.g. the title-only Wikipedia articles) are not yielded; they
are counted in :attr:`ReadStats.empty_documents`.

Error modes (``errors``): ``"strict"`` raises :class:`~muppets.errors.DataError` for an empty
file, undecodable bytes (naming file, line and byte offset), a malformed jsonl line or a broken
``<doc>`` structure. ``"skip"`` logs a warning and counts them instead (empty files and bad
lines are skipped). ``"replace"`` is ``"skip"``, except that undecodable bytes become U+FFFD
(counted in :attr:`ReadStats.replaced`) and the line is kept. Missing paths and directories
without any text file always raise.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from muppets.data.formats import compression_of, container_of, iter_byte_lines, iter_rows, text_suffix
from muppets.data.languages import line_paragraphs, tei_paragraphs, wrapped_paragraphs, zhwiki_paragraphs
from muppets.errors import DataError

__all__ = ["Document", "ReadStats", "KeyRange", "FORMATS", "CORPUS_FORMATS", "ERROR_MODES", "list_files",
           "input_bytes", "part_range", "detect_format", "iter_documents"]

logger = logging.getLogger(__name__)

ERROR_MODES = ("strict", "skip", "replace")
SNIFF_LINES = 400  # how far `auto` looks for a Gutenberg START line

_GUTENBERG_START = re.compile(r"^\*\*\*\s*START OF (THIS|THE) PROJECT GUTENBERG EBOOK", re.I)
_GUTENBERG_END = re.compile(r"^\*\*\*\s*END OF (THIS|THE) PROJECT GUTENBERG EBOOK", re.I)
_GUTENBERG_CREDIT = re.compile(r"^(produced by|transcribed (from|by)|e-?text prepared by)", re.I)
_GUTENBERG_CLOSING = re.compile(r"^end of (the )?project gutenberg", re.I)
_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")
_TEXT_SUFFIXES = frozenset({"", ".txt", ".text", ".jsonl", ".parquet", ".arrow"})  # walked in directories
_SKIPPED_NAMES = frozenset({"MANIFEST.tsv"})


@dataclass
class Document:
    """One document: where it came from (``path:line``) and its paragraphs (non-empty strings)."""

    source: str
    paragraphs: list[str]


@dataclass
class ReadStats:
    """Counters filled in while :func:`iter_documents` runs (pass one in to read them)."""

    files: int = 0  # files opened
    bytes_read: int = 0  # raw bytes consumed so far (drives progress bars)
    documents: int = 0  # documents yielded
    empty_documents: int = 0  # documents without any paragraph, not yielded
    skipped_files: int = 0  # empty files skipped (errors != "strict")
    skipped_lines: int = 0  # undecodable / malformed lines skipped (errors != "strict")
    replaced: int = 0  # undecodable byte sequences replaced by U+FFFD (errors="replace")
    formats: dict[str, int] = field(default_factory=dict)  # files per detected format

    _COUNTERS = ("files", "documents", "empty_documents", "skipped_files", "skipped_lines", "replaced")

    def add_since(self, now: ReadStats, then: ReadStats) -> None:
        """Add the counters ``now`` gained since ``then`` (``bytes_read`` aside)."""
        for name in self._COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(now, name) - getattr(then, name))
        for kind, count in now.formats.items():
            if count != then.formats.get(kind, 0):
                self.formats[kind] = self.formats.get(kind, 0) + count - then.formats.get(kind, 0)

    def copy(self) -> ReadStats:
        return ReadStats(**{**self.__dict__, "formats": dict(self.formats)})


@dataclass(frozen=True)
class KeyRange:
    """The documents one part of a corpus prepared on several machines reads (``--part I/N``).

    A document's *key* is :attr:`ReadStats.bytes_read` when the reader yields it: the raw bytes
    on disk read so far over the concatenated input files. Keys never decrease along the stream
    and depend only on the files and this module, so every machine computes the same ones; a
    part owns the keys in ``[lo, hi)`` (``hi=None``: no upper end), a contiguous stretch of the
    stream. A compressed or columnar file's documents all have the key of the file's start
    (its bytes count when it is done), so such a file goes whole to one part.
    """

    lo: int = 0
    hi: int | None = None

    def __contains__(self, key: int) -> bool:
        return self.lo <= key and (self.hi is None or key < self.hi)

    def after(self, key: int) -> bool:
        """Whether ``key`` (and so every later one) lies past the range."""
        return self.hi is not None and key >= self.hi

    def span(self, total: int) -> int:
        """Bytes of a ``total``-byte input inside the range (for progress)."""
        return max(0, (total if self.hi is None else min(self.hi, total)) - self.lo)

    def progress(self, key: int) -> int:
        """Bytes of the range read once the stream is at ``key``."""
        return max(0, (key if self.hi is None else min(key, self.hi)) - self.lo)


def input_bytes(files: Iterable[Path]) -> int:
    """The bytes on disk of ``files`` (as :func:`list_files` gives them): the key space."""
    return sum(_size(Path(f)) for f in files)


def part_range(index: int, count: int, total: int) -> KeyRange:
    """The keys part ``index`` of ``count`` (1-based, like ``split -n K/N``) owns in a
    ``total``-byte input: ``[floor((I-1)·B/N), floor(I·B/N))``, the last part up to the end."""
    if not (isinstance(index, int) and isinstance(count, int) and 1 <= index <= count):
        raise ValueError(f"part {index}/{count}: need 1 <= I <= N (e.g. 2/3)")
    return KeyRange((index - 1) * total // count, None if index == count else index * total // count)


@dataclass
class _Context:
    """What every parser needs besides its lines: the error mode and the counters."""

    path: Path
    errors: str
    stats: ReadStats
    text_field: str = "text"

    def problem(self, error: DataError) -> None:
        """Raise ``error`` in strict mode; otherwise log it and count a skipped line."""
        if self.errors == "strict":
            raise error
        logger.warning("skipped: %s", error)
        self.stats.skipped_lines += 1


# ----------------------------------------------------------------------------- file listing


def list_files(paths: Iterable[str | Path] | str | Path, fmt: str = "auto") -> list[Path]:
    """Expand files and directories into the sorted list of input files.

    Directories are walked recursively, top-down in sorted order (a directory's files before
    its subdirectories), following symlinks; hidden entries, ``MANIFEST.tsv`` and
    files whose suffix is not a text suffix (``.txt``, ``.text``, ``.jsonl``, none; plus
    ``.json`` when ``fmt="jsonl"``) are skipped. Files named explicitly are always kept. A file
    reached twice (a directory and a file in it, a symbolic link to a file already listed) is
    listed once, where it is first reached: read twice, its documents could land on both sides of
    a held-out split.
    """
    _check_choice("fmt", fmt, FORMATS)
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir() and container_of(path) == "hf-dataset":
            files.append(path)  # a datasets.save_to_disk directory is one input
        elif path.is_dir():
            found = _walk(path, fmt)
            if not found:
                raise DataError("directory contains no text files to read", path=path)
            files.extend(found)
        elif path.is_file():
            files.append(path)
        elif path.exists():
            raise DataError("not a regular file or directory", path=path)
        else:
            raise DataError("no such file or directory", path=path)
    if not files:
        raise DataError("no input paths given")
    return _unique_files(files)


def _unique_files(files: list[Path]) -> list[Path]:
    """``files`` without those whose real path (links resolved) an earlier one has."""
    seen: dict[str, Path] = {}
    for path in files:
        first = seen.setdefault(os.path.realpath(path), path)
        if first is not path:
            logger.info("%s is the file %s, listed already: read once", path, first)
    return list(seen.values())


def _walk(directory: Path, fmt: str) -> list[Path]:
    suffixes = _TEXT_SUFFIXES | ({".json"} if fmt == "jsonl" else set()) | ({f".{fmt}"} if fmt in ("csv", "tsv") else set())

    def fail(err: OSError) -> None:
        raise DataError(f"cannot list directory: {err.strerror}", path=err.filename)

    found = []
    for root, dirs, names in os.walk(directory, onerror=fail, followlinks=True):
        datasets = {d for d in dirs if container_of(Path(root) / d) == "hf-dataset"}
        found.extend(Path(root) / d for d in sorted(datasets) if not d.startswith("."))
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in datasets)
        for name in sorted(names):
            path = Path(root) / name
            if name.startswith(".") or name in _SKIPPED_NAMES or text_suffix(path) not in suffixes:
                logger.debug("not a corpus file, skipped: %s", path)
            elif path.is_file():
                found.append(path)
    return found


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


# ----------------------------------------------------------------------------- documents


def iter_documents(
    paths: Iterable[str | Path] | str | Path,
    fmt: str = "auto",
    *,
    errors: str = "strict",
    text_field: str = "text",
    stats: ReadStats | None = None,
    part: KeyRange | tuple[int, int] | None = None,
) -> Iterator[Document]:
    """Yield the non-empty documents of ``paths`` (files or directories) in order, streaming.

    Args:
        paths: files and/or directories (see :func:`list_files`).
        fmt: one of :data:`FORMATS`; ``"auto"`` decides per file.
        errors: ``"strict"``, ``"skip"`` or ``"replace"`` (see the module docstring).
        text_field: the jsonl field holding the text.
        stats: counters to fill in (files, bytes, empty documents, skipped, replaced).
        part: only the documents whose key lies in this :class:`KeyRange` (or part ``(I, N)``:
            :func:`part_range`). Files wholly before the range are not opened, reading stops
            at the first key past it, and ``stats`` holds this part's share of the counters:
            summed over the parts of a partition they are those of reading everything.
            ``stats.bytes_read`` then counts the range's bytes read.
    """
    _check_choice("errors", errors, ERROR_MODES)
    stats = stats if stats is not None else ReadStats()
    files = list_files(paths, fmt)
    if part is not None:
        keys = part if isinstance(part, KeyRange) else part_range(*part, input_bytes(files))
        yield from _part_documents(files, fmt, errors, text_field, stats, keys)
        return
    for path in files:
        ctx = _Context(path, errors, stats, text_field)
        for doc in _file_documents(ctx, fmt):
            if _counted(stats, doc):
                yield doc


def _counted(stats: ReadStats, doc: Document) -> bool:
    """Count ``doc`` as a document or an empty one; whether it is to be yielded."""
    if doc.paragraphs:
        stats.documents += 1
        return True
    stats.empty_documents += 1
    logger.debug("empty document skipped: %s", doc.source)
    return False


def _part_documents(files: list[Path], fmt: str, errors: str, text_field: str, stats: ReadStats,
                    keys: KeyRange) -> Iterator[Document]:
    """:func:`iter_documents` of the documents whose key is in ``keys``. The files are read with
    counters of their own (``seen``); what they gain up to an event — a document, empty or not,
    or a file's end — is this part's when the event's key is in ``keys``: every change of a
    counter goes to exactly one part, the same on every machine."""
    seen, taken = ReadStats(), ReadStats()  # the stream's counters; those already given out

    def event(key: int) -> bool:
        nonlocal taken
        mine = key in keys
        if mine:
            stats.add_since(seen, taken)
        taken = seen.copy()
        stats.bytes_read = keys.progress(key)
        return mine

    start = 0
    for path in files:
        end = start + _size(path)
        if keys.after(start):
            return
        if end < keys.lo:  # every key of the file is <= end: none is ours
            start = end
            stats.bytes_read = keys.progress(end)
            continue
        seen.bytes_read = start
        for doc in _file_documents(_Context(path, errors, seen, text_field), fmt):
            if keys.after(seen.bytes_read):
                return
            wanted = _counted(seen, doc)
            if event(seen.bytes_read) and wanted:
                yield doc
        if keys.after(end):
            return
        event(end)
        start = end


def detect_format(path: str | Path) -> str:
    """The format ``auto`` picks for ``path`` (raises DataError if the file is empty)."""
    path = Path(path)
    if container_of(path) is not None:
        return "columnar"
    sniff = _sniff(path)
    if sniff.empty:
        raise DataError("file is empty (no non-blank line)", path=path)
    return _auto_format(path, sniff)


def _file_documents(ctx: _Context, fmt: str) -> Iterator[Document]:
    kind = _file_format(ctx, fmt)
    done = ctx.stats.bytes_read + _size(ctx.path)
    if kind is None:
        ctx.stats.bytes_read = done  # a skipped file's bytes count too: keys are cumulative sizes
        return
    ctx.stats.files += 1
    ctx.stats.formats[kind] = ctx.stats.formats.get(kind, 0) + 1
    entry = CORPUS_FORMATS[kind]
    yield from entry.parse(ctx) if entry.columnar else entry.parse(ctx, _read_lines(ctx))
    ctx.stats.bytes_read = done  # count the whole file, even a skipped Gutenberg footer


def _file_format(ctx: _Context, fmt: str) -> str | None:
    """The format to read ``ctx.path`` with (None: an empty or binary file skipped)."""
    container = container_of(ctx.path)
    if container is not None or fmt == "columnar":
        if fmt not in ("auto", "columnar") or container is None:
            raise DataError(f"a {container or 'text'} input cannot be read as format {fmt!r} "
                            f"(use 'auto')", path=ctx.path)
        return "columnar"
    sniff = _sniff(ctx.path)
    problem = ("file is empty (no non-blank line)" if sniff.empty else
               "binary content, not text (a NUL byte)" if sniff.nul is not None else None)
    if problem is None:
        return _auto_format(ctx.path, sniff) if fmt == "auto" else fmt
    if ctx.errors == "strict":
        raise DataError(problem, path=ctx.path, position=sniff.nul)
    logger.warning("%s, skipped: %s", problem, ctx.path)
    ctx.stats.skipped_files += 1
    return None


def _size(path: Path) -> int:
    """Bytes on disk of a file, or of the files of a directory (a save_to_disk dataset)."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    return path.stat().st_size


@dataclass
class _Sniff:
    """What the first SNIFF_LINES lines of a file say about it."""

    first_line: str | None  # the first non-blank line, if any
    gutenberg: bool  # a Gutenberg START line was seen
    empty: bool  # the whole file holds no non-blank line
    nul: int | None = None  # byte offset of a NUL byte in the lines looked at: a binary file


def _sniff(path: Path) -> _Sniff:
    first, marker, nul, offset = None, False, None, 0
    lines = iter_byte_lines(path)
    for _, raw in zip(range(SNIFF_LINES), lines):
        if nul is None and b"\x00" in raw:
            nul = offset + raw.index(b"\x00")
            break
        offset += len(raw)
        line = raw.decode("utf-8", errors="replace").lstrip("\ufeff")
        if first is None and line.strip():
            first = line
        if _GUTENBERG_START.match(line):
            marker = True
            break
    empty = nul is None and first is None and not any(raw.strip() for raw in lines)
    lines.close()
    return _Sniff(first, marker, empty, nul)


def _auto_format(path: Path, sniff: _Sniff) -> str:
    by_suffix = {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "tsv"}
    if text_suffix(path) in by_suffix:
        return by_suffix[text_suffix(path)]
    if sniff.first_line is not None and sniff.first_line.startswith("<doc "):
        return "wikiextractor"
    return "gutenberg" if sniff.gutenberg else "text"


# ----------------------------------------------------------------------------- decoding


def _read_lines(ctx: _Context) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` with line endings (LF or CRLF) and a leading BOM removed,
    decompressing first. Progress (``bytes_read``) counts bytes on disk: a compressed file's
    are counted when it is done."""
    offset = 0
    plain = compression_of(ctx.path) is None
    for number, raw in enumerate(iter_byte_lines(ctx.path), start=1):
        text = _decode(ctx, raw, number, offset)
        offset += len(raw)
        ctx.stats.bytes_read += len(raw) if plain else 0
        if text is None:
            continue
        if number == 1:
            text = text.lstrip("\ufeff")
        yield number, text.rstrip("\r\n")


def _decode(ctx: _Context, raw: bytes, number: int, offset: int) -> str | None:
    """Decode one line as UTF-8 according to ``ctx.errors`` (None = skip the line)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        if ctx.errors == "replace":
            text, count = _decode_replacing(raw)
            ctx.stats.replaced += count
            return text
        context = raw[max(0, err.start - 20):err.end + 20]
        ctx.problem(DataError(
            f"invalid UTF-8 at column {err.start + 1} ({err.reason}) in {context!r}; "
            "rerun with --errors replace (errors='replace' in Python) to substitute U+FFFD",
            path=ctx.path, line=number, position=offset + err.start,
            value=raw[err.start:err.end],
        ))
        return None


def _decode_replacing(raw: bytes) -> tuple[str, int]:
    """Decode with every invalid byte sequence replaced by U+FFFD; also return how many."""
    parts, count, pos = [], 0, 0
    while True:
        try:
            parts.append(raw[pos:].decode("utf-8"))
            return "".join(parts), count
        except UnicodeDecodeError as err:
            parts.append(raw[pos:pos + err.start].decode("utf-8"))
            parts.append("\ufffd")
            count += 1
            pos += err.end


# ----------------------------------------------------------------------------- parsers


def _blocks(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Join each run of non-blank lines with single spaces: ``(first_line_number, text)``."""
    block: list[str] = []
    start = 0
    for number, line in lines:
        stripped = line.strip()
        if stripped:
            if not block:
                start = number
            block.append(stripped)
        elif block:
            yield start, " ".join(block)
            block = []
    if block:
        yield start, " ".join(block)


def _parse_text(ctx: _Context, lines: Iterator[tuple[int, str]]) -> Iterator[Document]:
    for start, paragraph in _blocks(lines):
        yield Document(f"{ctx.path}:{start}", [paragraph])


def _parse_lines(ctx: _Context, lines: Iterator[tuple[int, str]]) -> Iterator[Document]:
    """One document of one paragraph per non-blank line (review snippets, tweets, one sentence
    a line): never joined with the next line, as ``text`` joins a block."""
    for number, line in lines:
        if line.strip():
            yield Document(f"{ctx.path}:{number}", [line.strip()])


def _parse_gutenberg(ctx: _Context, lines: Iterator[tuple[int, str]]) -> Iterator[Document]:
    start = next((n for n, line in lines if _GUTENBERG_START.match(line)), None)
    if start is None:
        raise DataError("no '*** START OF THE PROJECT GUTENBERG EBOOK' line", path=ctx.path)
    ended = False

    def body() -> Iterator[tuple[int, str]]:
        nonlocal ended
        for number, line in lines:
            if _GUTENBERG_END.match(line):
                ended = True
                return
            yield number, line

    paragraphs = _strip_gutenberg_credits([text for _, text in _blocks(body())])
    if not ended:
        logger.warning("%s: no '*** END OF THE PROJECT GUTENBERG EBOOK' line; kept the text "
                       "up to the end of the file", ctx.path)
    yield Document(f"{ctx.path}:{start + 1}", paragraphs)


def _strip_gutenberg_credits(paragraphs: list[str]) -> list[str]:
    """Drop leading transcriber credits and the trailing "End of the Project Gutenberg…" line."""
    start, end = 0, len(paragraphs)
    while start < end and _GUTENBERG_CREDIT.match(paragraphs[start]):
        start += 1
    while end > start and _GUTENBERG_CLOSING.match(paragraphs[end - 1]):
        end -= 1
    return paragraphs[start:end]


def _parse_wikiextractor(ctx: _Context, lines: Iterator[tuple[int, str]]) -> Iterator[Document]:
    opened: int | None = None  # line number of the open <doc>, if any
    paragraphs: list[str] = []
    for number, line in lines:
        if line.startswith("<doc "):
            if opened is not None:
                ctx.problem(DataError(f"<doc> opened before the one of line {opened} was "
                                      "closed", path=ctx.path, line=number))
                yield Document(f"{ctx.path}:{opened}", paragraphs[1:])
            opened, paragraphs = number, []
        elif line.startswith("</doc>") and opened is not None:
            yield Document(f"{ctx.path}:{opened}", paragraphs[1:])  # [0] is the title
            opened = None
        elif line.strip():
            if opened is None:
                ctx.problem(DataError("text outside <doc> … </doc>", path=ctx.path,
                                      line=number, value=line[:60]))
            else:
                paragraphs.append(line.strip())
    if opened is not None:
        ctx.problem(DataError("<doc> never closed", path=ctx.path, line=opened))
        yield Document(f"{ctx.path}:{opened}", paragraphs[1:])


def _parse_jsonl(ctx: _Context, lines: Iterator[tuple[int, str]]) -> Iterator[Document]:
    for number, line in lines:
        if not line.strip():
            continue
        text = _jsonl_text(ctx, number, line)
        if text is not None:
            yield Document(f"{ctx.path}:{number}", text_paragraphs(text))


def _jsonl_text(ctx: _Context, number: int, line: str) -> str | None:
    """The ``text_field`` string of one jsonl line, or None after reporting a problem."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        ctx.problem(DataError(f"malformed JSON ({err.msg} at column {err.colno})",
                              path=ctx.path, line=number, value=line[:60]))
        return None
    if not isinstance(record, dict) or ctx.text_field not in record:
        keys = sorted(record) if isinstance(record, dict) else type(record).__name__
        ctx.problem(DataError(f"no {ctx.text_field!r} field in JSON object", path=ctx.path,
                              line=number, value=keys))
        return None
    text = record[ctx.text_field]
    if not isinstance(text, str):
        ctx.problem(DataError(f"field {ctx.text_field!r} is not a string", path=ctx.path,
                              line=number, value=text))
        return None
    return text


def text_paragraphs(text: str) -> list[str]:
    """Paragraphs of a multi-line string (the jsonl rule, see the module docstring).

    >>> text_paragraphs("a\\nb\\n\\nc")
    ['a b', 'c']
    >>> text_paragraphs("a\\nb")
    ['a', 'b']
    """
    text = text.replace("\r\n", "\n")
    if _BLANK_LINE.search(text):
        return [p for _, p in _blocks(enumerate(text.split("\n")))]
    return [line.strip() for line in text.split("\n") if line.strip()]


def _whole_file(rejoin: Callable[[Iterable[tuple[int, str]]], list[str]]) -> Callable[..., Iterator[Document]]:
    """A parser for a one-novel-per-file layout: one document, paragraphs from ``rejoin``."""
    def parse(ctx: _Context, lines: Iterator[tuple[int, str]]) -> Iterator[Document]:
        yield Document(f"{ctx.path}:1", rejoin(lines))
    return parse


def _parse_zhwiki(ctx: _Context, lines: Iterator[tuple[int, str]]) -> Iterator[Document]:
    for doc in _parse_wikiextractor(ctx, lines):
        yield Document(doc.source, zhwiki_paragraphs(iter(doc.paragraphs)))


class _LineTracker:
    """Feeds decoded lines to ``csv.reader`` and remembers the number of the last one fed."""

    def __init__(self, lines: Iterator[tuple[int, str]]) -> None:
        self.lines, self.number = lines, 0

    def __iter__(self) -> Iterator[str]:
        for self.number, text in self.lines:
            yield text + "\n"


def _table(delimiter: str) -> Callable[..., Iterator[Document]]:
    """A parser for a csv / tsv table with a header: one document per row, ``text_field``'s cell."""
    def parse(ctx: _Context, lines: Iterator[tuple[int, str]]) -> Iterator[Document]:
        tracker = _LineTracker(lines)
        rows = csv.reader(iter(tracker), delimiter=delimiter)
        header = next(rows, None)
        if header is None or ctx.text_field not in header:
            raise DataError(f"no column {ctx.text_field!r} in the header {header}", path=ctx.path,
                            line=tracker.number or None, value=ctx.text_field)
        column = header.index(ctx.text_field)
        start = tracker.number + 1
        for row in rows:
            if len(row) <= column:
                if row:
                    ctx.problem(DataError(f"{len(row)} cells, no {ctx.text_field!r} column",
                                          path=ctx.path, line=start))
            else:
                yield Document(f"{ctx.path}:{start}", text_paragraphs(row[column]))
            start = tracker.number + 1
    return parse


def _parse_columnar(ctx: _Context) -> Iterator[Document]:
    for row, record in iter_rows(ctx.path, [ctx.text_field]):
        text = record[ctx.text_field]
        if isinstance(text, str):
            yield Document(f"{ctx.path}:{row}", text_paragraphs(text))
        elif text is not None:
            ctx.problem(DataError(f"column {ctx.text_field!r} is not a string", path=ctx.path,
                                  line=row, value=short_repr(text)))


def short_repr(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


@dataclass(frozen=True)
class CorpusFormat:
    """One entry of the table of corpus formats: the parser, and whether it reads text lines
    (``parse(ctx, lines)``, compression undone underneath) or columnar rows (``parse(ctx)``)."""

    parse: Callable[..., Iterator[Document]]
    columnar: bool = False


CORPUS_FORMATS: dict[str, CorpusFormat] = {
    "text": CorpusFormat(_parse_text),
    "lines": CorpusFormat(_parse_lines),
    "gutenberg": CorpusFormat(_parse_gutenberg),
    "wikiextractor": CorpusFormat(_parse_wikiextractor),
    "jsonl": CorpusFormat(_parse_jsonl),
    "csv": CorpusFormat(_table(",")),
    "tsv": CorpusFormat(_table("\t")),
    "columnar": CorpusFormat(_parse_columnar, columnar=True),
    "novel-wrapped": CorpusFormat(_whole_file(wrapped_paragraphs)),
    "novel-lines": CorpusFormat(_whole_file(line_paragraphs)),
    "novel-tei": CorpusFormat(_whole_file(tei_paragraphs)),
    "zhwiki": CorpusFormat(_parse_zhwiki),
}
FORMATS = ("auto", *CORPUS_FORMATS)
