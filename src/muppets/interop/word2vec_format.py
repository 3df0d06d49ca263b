"""The word-vector file formats everyone exchanges: word2vec text and binary, and GloVe text.

``word2vec`` text (Mikolov et al. 2013, the C tool's ``-binary 0``; gensim's
``save_word2vec_format(binary=False)``)::

    <V> <d>\\n
    word v_1 v_2 ... v_d\\n          (V lines; values separated by one space)

``word2vec`` binary (``-binary 1``; gensim's ``binary=True``): the same header, then per word
the UTF-8 word, one space and ``d`` little-endian float32 values (``4 d`` raw bytes). gensim
writes nothing after the values; the C tool writes a newline, which readers strip from the
start of the next word. Words therefore never contain a space.

``GloVe`` text (Pennington et al. 2014): the text format without the header line; the
dimension is that of the first row. A few published GloVe files have words with spaces in
them (``. . .``), so a GloVe row's word is everything before its last ``d`` fields.

Writers produce exactly what gensim 4 writes (values as the shortest decimal that reads back to
the same float32, i.e. ``str(np.float32(v))``), atomically (temporary file + rename). Readers
raise :class:`~muppets.errors.DataError` naming the file, the line (text) or byte offset
(binary) and the offending value; a repeated word keeps its first vector, as gensim does.

Usage::

    write_word2vec_format("vectors.bin", words, matrix, binary=True)
    words, matrix = read_vectors("vectors.bin")          # format sniffed
    words, matrix = read_vectors("glove.6B.50d.txt", fmt="glove")
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from muppets.config import atomic_path
from muppets.errors import DataError

__all__ = ["FORMATS", "read_vectors", "read_word2vec_format", "read_glove", "sniff_format",
           "write_word2vec_format"]

logger = logging.getLogger(__name__)

FORMATS = ("auto", "word2vec-text", "word2vec-binary", "glove")
_FLOAT = np.dtype("<f4")
_BLOCK = 1 << 20  # bytes read at a time from a binary file


def read_vectors(path: str | Path, fmt: str = "auto", limit: int | None = None,
                 unicode_errors: str = "strict") -> tuple[list[str], np.ndarray]:
    """``(words, (V, d) float32)`` from a file in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt not in FORMATS:
        raise DataError(f"unknown vector format (expected one of {', '.join(FORMATS)})", value=fmt)
    fmt = sniff_format(path) if fmt == "auto" else fmt
    if fmt == "glove":
        return read_glove(path, limit=limit, unicode_errors=unicode_errors)
    return read_word2vec_format(path, binary=fmt == "word2vec-binary", limit=limit,
                                unicode_errors=unicode_errors)


def sniff_format(path: str | Path) -> str:
    """``word2vec-text``, ``word2vec-binary`` or ``glove``, from the first two lines.

    A first line of two integers is a word2vec header; the format is text when the next line
    is a word followed by exactly ``d`` numbers, else binary. Any other first line is GloVe.
    """
    path = _existing(path)
    with path.open("rb") as fh:
        header = fh.readline()
        parts = header.split()
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            return "glove"
        first = fh.readline()
    try:
        values = first.decode("utf-8").rstrip().split(" ")[1:]
        return "word2vec-text" if len(values) == int(parts[1]) and _all_floats(values) else "word2vec-binary"
    except UnicodeDecodeError:
        return "word2vec-binary"


def read_word2vec_format(path: str | Path, binary: bool = False, limit: int | None = None,
                         unicode_errors: str = "strict") -> tuple[list[str], np.ndarray]:
    """Vectors of a word2vec text or binary file (at most ``limit`` of them)."""
    path = _existing(path)
    with path.open("rb") as fh:
        count, dim = _read_header(fh, path)
        count = count if limit is None else min(count, limit)
        fits = _rows_that_fit(fh, (4 * dim + 1) if binary else 2 * dim)  # bytes of the shortest row
        rows = _binary_rows(fh, path, count, dim, unicode_errors) if binary else \
            _text_rows(fh, path, count, dim, unicode_errors, first_line=2)
        return _collect(rows, min(count, fits), dim, path)


def read_glove(path: str | Path, limit: int | None = None,
               unicode_errors: str = "strict") -> tuple[list[str], np.ndarray]:
    """Vectors of a GloVe text file: no header, ``d`` = the number of values on the first row."""
    path = _existing(path)
    with path.open("rb") as fh:
        first = fh.readline()
        if not first.strip():
            raise DataError("empty GloVe file", path=path, line=1)
        dim = len(_decode(first, path, 1, unicode_errors).rstrip().split(" ")) - 1
        if dim < 1:
            raise DataError("a GloVe row needs a word and at least one value", path=path, line=1,
                            value=first[:60])
        fh.seek(0)
        count = limit if limit is not None else sum(1 for line in fh if line.strip())
        fh.seek(0)
        return _collect(_text_rows(fh, path, count, dim, unicode_errors, first_line=1, glove=True),
                        min(count, _rows_that_fit(fh, 2 * dim)), dim, path)


def write_word2vec_format(path: str | Path, words: Sequence[str], vectors: np.ndarray,
                          binary: bool = False) -> Path:
    """Write ``vectors`` ((V, d), row i = ``words[i]``) as gensim does, atomically."""
    path = Path(path)
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != len(words):
        raise DataError(f"{len(words)} words but a vector matrix of shape {matrix.shape}", path=path)
    for word in words:
        if not word or any(ch.isspace() for ch in word):
            raise DataError("a word in the word2vec format can neither be empty nor contain "
                            "whitespace", path=path, value=word)
    with atomic_path(path) as tmp, tmp.open("wb") as fh:
        fh.write(f"{matrix.shape[0]} {matrix.shape[1]}\n".encode("utf-8"))
        for word, row in zip(words, matrix):
            if binary:
                fh.write(f"{word} ".encode("utf-8") + row.astype(_FLOAT).tobytes())
            else:  # str(np.float32) = the shortest decimal that reads back to the same float32
                fh.write(f"{word} {' '.join(str(v) for v in row)}\n".encode("utf-8"))
    logger.info("wrote %d x %d vectors to %s (%s)", *matrix.shape, path, "binary" if binary else "text")
    return path


# ----------------------------------------------------------------------------- helpers


def _existing(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise DataError("no such vector file", path=path)
    return path


def _all_floats(values: Sequence[str]) -> bool:
    try:
        np.asarray(values, dtype=np.float32)
    except ValueError:
        return False
    return True


def _decode(raw: bytes | bytearray, path: Path, line: int | None, errors: str,
            position: int | None = None) -> str:
    try:
        return raw.decode("utf-8", errors=errors)
    except UnicodeDecodeError as err:
        raise DataError(f"not UTF-8 ({err.reason}); pass unicode_errors='replace' or 'ignore'",
                        path=path, line=line, position=position, value=bytes(raw[:60])) from err


def _rows_that_fit(fh: BinaryIO, row_bytes: int) -> int:
    """How many rows of at least ``row_bytes`` bytes the rest of ``fh`` can hold: the most rows
    worth allocating, whatever a (corrupt or hostile) header or row count claims. The shortest
    rows are ``<space><4 d bytes>`` (binary) and ``d`` times ``<space><digit>`` (text)."""
    return max(0, os.fstat(fh.fileno()).st_size - fh.tell()) // row_bytes


def _read_header(fh: BinaryIO, path: Path) -> tuple[int, int]:
    raw = fh.readline()
    parts = raw.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise DataError("expected a '<count> <dimension>' header (a GloVe file has none: "
                        "use fmt='glove')", path=path, line=1, value=raw[:60])
    count, dim = int(parts[0]), int(parts[1])
    if dim < 1:
        raise DataError("vector dimension must be positive", path=path, line=1, value=dim)
    return count, dim


def _text_rows(fh: BinaryIO, path: Path, count: int, dim: int, errors: str, first_line: int,
               glove: bool = False) -> Iterator[tuple[str, np.ndarray]]:
    """``count`` rows ``word v_1 .. v_d`` (GloVe: the word is all but the last ``d`` fields)."""
    lineno = first_line - 1
    for _ in range(count):
        raw = fh.readline()
        lineno += 1
        while glove and raw and not raw.strip():  # blank lines in GloVe files are skipped
            raw, lineno = fh.readline(), lineno + 1
        if not raw:
            raise DataError(f"file ends after {lineno - first_line} of {count} vectors", path=path,
                            line=lineno)
        parts = _decode(raw, path, lineno, errors).rstrip().split(" ")
        found = len(parts) - 1
        if found < dim or (found > dim and not glove):
            raise DataError(f"expected {dim} values after the word, found {len(parts) - 1}",
                            path=path, line=lineno, value=parts[0])
        word, values = " ".join(parts[:-dim]), parts[-dim:]
        try:
            yield word, np.asarray(values, dtype=np.float32)
        except ValueError as err:
            bad = next(v for v in values if not _all_floats([v]))
            raise DataError("not a number", path=path, line=lineno, value=bad) from err


def _binary_rows(fh: BinaryIO, path: Path, count: int, dim: int,
                 errors: str) -> Iterator[tuple[str, np.ndarray]]:
    """``count`` records ``word<space><4 d bytes>``; byte offsets name a broken record.

    Linear in the file size, however long a record is: a block read while looking for a
    record's space is searched once (from ``scanned``), and records already yielded are dropped
    from the buffer once per record, not once per block."""
    size = 4 * dim
    buf, start, offset = bytearray(), 0, fh.tell()  # offset = file position of buf[0]
    for index in range(count):
        space, scanned = buf.find(b" ", start), len(buf)  # buf[start:scanned] searched
        while space == -1 or len(buf) - space - 1 < size:
            if start:  # drop the records already yielded before the buffer grows
                del buf[:start]
                offset, scanned, space = offset + start, scanned - start, -1 if space == -1 else space - start
                start = 0
            block = fh.read(_BLOCK)
            if not block:
                raise DataError(f"file ends inside vector {index + 1} of {count}", path=path,
                                position=offset + start)
            buf += block
            if space == -1:
                space, scanned = buf.find(b" ", scanned), len(buf)
        word = _decode(buf[start:space], path, None, errors, position=offset + start).lstrip("\n")
        yield word, np.frombuffer(buf, dtype=_FLOAT, count=dim, offset=space + 1).astype(np.float32)
        start = space + 1 + size


def _collect(rows: Iterator[tuple[str, np.ndarray]], count: int, dim: int,
             path: Path) -> tuple[list[str], np.ndarray]:
    """Fill a ``(count, dim)`` matrix; a repeated word keeps its first vector (as gensim).
    ``count`` is at most what the file can hold (:func:`_rows_that_fit`): ``rows`` raises a
    :class:`DataError` where the file ends before the count its header promised."""
    words: list[str] = []
    seen: set[str] = set()
    matrix = np.empty((count, dim), dtype=np.float32)
    for word, vector in rows:
        if word in seen:
            logger.warning("%s: word %r listed twice; keeping its first vector", path, word)
            continue
        seen.add(word)
        matrix[len(words)] = vector
        words.append(word)
    return words, matrix[: len(words)]
