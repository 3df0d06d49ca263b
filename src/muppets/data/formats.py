"""The one table of file formats every reader goes through: compression, then container.

A file is looked at twice, by content first and by suffix second:

* **compression** (:data:`COMPRESSIONS`): gzip, bz2, xz and zstd, recognised by their magic
  bytes (a ``.gz`` file that is not gzip is read as it is; a gzip file without ``.gz`` is
  still decompressed). It is a layer under every text format: :func:`open_stream` hands any
  text reader the decompressed bytes, so ``corpus.jsonl.zst`` is read by the jsonl reader;
* **container** (:data:`CONTAINERS`): parquet (``PAR1``), Arrow IPC files (``ARROW1``) and
  streams, and ``datasets.save_to_disk`` directories (``state.json`` + ``*.arrow`` streams)
  are *columnar*: :func:`iter_rows` streams their rows one record batch at a time, reading only
  the columns asked for, so memory stays flat in corpus size. Everything else is text, and
  :func:`text_suffix` names it by the suffix under the compression one (``a.jsonl.gz`` →
  ``.jsonl``).

Columnar formats need pyarrow and zstd needs zstandard: optional extras (``muppets[columnar]``,
``muppets[zstd]``); a missing one is one :class:`~muppets.errors.ConfigError` naming it.
Truncated or corrupt compressed data is a :class:`~muppets.errors.DataError` naming the file and
how many decompressed bytes were read before it.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from muppets.errors import ConfigError, DataError

__all__ = ["COMPRESSIONS", "CONTAINERS", "Compression", "compression_of", "container_of",
           "open_stream", "iter_byte_lines", "read_bytes", "text_suffix", "iter_rows",
           "is_columnar", "column_names", "class_label_names", "dataset_dict_splits", "json_layout", "ROW_BATCH"]

ROW_BATCH = 1024  # rows per record batch read from a columnar file


@dataclass(frozen=True)
class Compression:
    """One compression format: its magic bytes, its suffixes and how to open it."""

    name: str
    magic: bytes
    suffixes: tuple[str, ...]
    open: Callable[[BinaryIO], BinaryIO]


def _open_zstd(raw: BinaryIO) -> BinaryIO:
    try:
        import zstandard
    except ImportError:
        raise ConfigError("reading zstd-compressed files needs the zstandard package: "
                          "pip install 'muppets[zstd]'") from None
    return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)  # type: ignore[return-value]


COMPRESSIONS = (
    Compression("gzip", b"\x1f\x8b", (".gz", ".gzip"), lambda raw: gzip.GzipFile(fileobj=raw)),  # type: ignore[arg-type,return-value]
    Compression("bz2", b"BZh", (".bz2",), lambda raw: bz2.BZ2File(raw)),  # type: ignore[return-value]
    Compression("xz", b"\xfd7zXZ\x00", (".xz",), lambda raw: lzma.LZMAFile(raw)),  # type: ignore[return-value]
    Compression("zstd", b"\x28\xb5\x2f\xfd", (".zst", ".zstd"), _open_zstd),
)
_CORRUPT = (EOFError, OSError, lzma.LZMAError, ValueError)  # what decompressors raise on bad data


def _head(path: Path, size: int = 8) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except FileNotFoundError:
        raise DataError("no such file", path=path) from None
    except OSError as err:
        raise DataError(f"cannot read file: {err.strerror}", path=path) from None


def compression_of(path: str | Path) -> Compression | None:
    """The compression of ``path`` by its magic bytes (None: not compressed)."""
    head = _head(Path(path))
    return next((c for c in COMPRESSIONS if head.startswith(c.magic)), None)


def text_suffix(path: str | Path) -> str:
    """The lower-case suffix naming the text format, under any compression suffix."""
    path = Path(path)
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and any(suffixes[-1] in c.suffixes for c in COMPRESSIONS):
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def open_stream(path: str | Path) -> BinaryIO:
    """``path`` opened for reading bytes, decompressed when its content is compressed."""
    path = Path(path)
    kind = compression_of(path)
    try:
        raw = open(path, "rb", buffering=1 << 20)
    except OSError as err:
        raise DataError(f"cannot open file: {err.strerror}", path=path) from err
    if kind is None:
        return raw  # type: ignore[return-value]
    try:
        return io.BufferedReader(kind.open(raw), buffer_size=1 << 20)  # type: ignore[arg-type]
    except ConfigError:
        raw.close()
        raise


def _corrupt(path: Path, done: int, err: BaseException) -> DataError:
    kind = compression_of(path)
    name = kind.name if kind else "compressed"
    return DataError(f"truncated or corrupt {name} data after {done} decompressed bytes "
                     f"({type(err).__name__}: {err})", path=path, position=done)


def iter_byte_lines(path: str | Path) -> Iterator[bytes]:
    """The raw lines of ``path`` (line ends kept), decompressed; bad compressed data raises."""
    path = Path(path)
    done = 0
    with open_stream(path) as fh:
        while True:
            try:
                line = fh.readline()
            except _CORRUPT as err:
                raise _corrupt(path, done, err) from None
            if not line:
                return
            done += len(line)
            yield line


def read_bytes(path: str | Path) -> bytes:
    """The whole (decompressed) content of ``path``."""
    return b"".join(iter_byte_lines(path))


def json_layout(path: str | Path) -> str:
    """``"lines"`` (JSON Lines: the first non-blank line is a whole JSON object) or
    ``"document"`` (one JSON document, e.g. SQuAD: pretty-printed over many lines, or one line
    holding an object with a ``"data"`` list). Reads only the first lines."""
    lines = (line for line in iter_byte_lines(path) if line.strip())
    first = next(lines, b"")
    try:
        obj = json.loads(first)
    except ValueError:
        return "document"
    if not isinstance(obj, dict):
        raise DataError("the first line is JSON but not an object: neither JSON Lines of "
                        "records nor a SQuAD-style document", path=path, line=1)
    if next(lines, None) is None and isinstance(obj.get("data"), list):
        return "document"
    return "lines"


# ----------------------------------------------------------------------------- columnar


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.ipc  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ConfigError("reading parquet / Arrow files and datasets.save_to_disk directories "
                          "needs pyarrow: pip install 'muppets[columnar]'") from None
    return pyarrow


def _hf_files(path: Path) -> list[Path] | None:
    """The Arrow files of a ``datasets.save_to_disk`` directory (None: not one)."""
    state = path / "state.json"
    if not (path.is_dir() and state.is_file()):
        return None
    try:
        names = [f["filename"] for f in json.loads(state.read_text())["_data_files"]]
    except (ValueError, KeyError, TypeError) as err:
        raise DataError(f"not a datasets.save_to_disk state file ({err})", path=state) from None
    return [path / name for name in names]


def dataset_dict_splits(path: str | Path) -> dict[str, Path] | None:
    """``{split: directory}`` of a ``DatasetDict.save_to_disk`` directory (``dataset_dict.json``
    beside one save_to_disk directory per split); None: not one."""
    path = Path(path)
    index = path / "dataset_dict.json"
    if not (path.is_dir() and index.is_file()):
        return None
    try:
        splits = json.loads(index.read_text())["splits"]
        return {str(split): path / str(split) for split in splits}
    except (ValueError, KeyError, TypeError) as err:
        raise DataError(f"not a datasets DatasetDict index ({err})", path=index) from None


CONTAINERS = {  # name -> (magic at the start, how to read its record batches)
    "parquet": b"PAR1",
    "arrow": b"ARROW1",
    "arrow-stream": b"\xff\xff\xff\xff",
}


def container_of(path: str | Path) -> str | None:
    """``parquet``, ``arrow``, ``arrow-stream`` or ``hf-dataset`` by content; None: text."""
    path = Path(path)
    if path.is_dir():
        return "hf-dataset" if _hf_files(path) is not None else None
    head = _head(path)
    return next((name for name, magic in CONTAINERS.items() if head.startswith(magic)), None)


def is_columnar(path: str | Path) -> bool:
    return container_of(path) is not None


def _batches(path: Path, kind: str, columns: list[str] | None) -> Iterator[Any]:
    pa = _pyarrow()
    if kind == "parquet":
        yield from pa.parquet.ParquetFile(path).iter_batches(ROW_BATCH, columns=columns)
    elif kind == "arrow":
        reader = pa.ipc.open_file(pa.memory_map(str(path)))
        for k in range(reader.num_record_batches):
            yield reader.get_batch(k).select(columns) if columns else reader.get_batch(k)
    else:  # an Arrow stream, memory-mapped: batches are views of the file, not copies
        for batch in pa.ipc.open_stream(pa.memory_map(str(path))):
            yield batch.select(columns) if columns else batch


def column_names(path: str | Path) -> list[str]:
    """The column names of a columnar file or directory (its first file's schema)."""
    path = Path(path)
    kind = container_of(path)
    pa = _pyarrow()
    if kind == "hf-dataset":
        files = _hf_files(path) or []
        return column_names(files[0]) if files else []
    if kind == "parquet":
        return list(pa.parquet.ParquetFile(path).schema_arrow.names)
    opener = pa.ipc.open_file if kind == "arrow" else pa.ipc.open_stream
    return list(opener(pa.memory_map(str(path))).schema.names)


def _schema_metadata(path: Path) -> dict[bytes, bytes]:
    kind = container_of(path)
    pa = _pyarrow()
    if kind == "parquet":
        schema = pa.parquet.ParquetFile(path).schema_arrow
    else:
        schema = (pa.ipc.open_file if kind == "arrow" else pa.ipc.open_stream)(pa.memory_map(str(path))).schema
    return dict(schema.metadata or {})


def _features(path: Path) -> dict[str, Any]:
    """The ``datasets`` features of a columnar file or directory ({} when it has none): the
    schema's ``huggingface`` metadata, else a save_to_disk directory's ``dataset_info.json``."""
    files = (_hf_files(path) or []) if path.is_dir() else [path]
    raw = _schema_metadata(files[0]).get(b"huggingface") if files else None
    try:
        if raw is not None:
            return json.loads(raw).get("info", {}).get("features") or {}
        info = path / "dataset_info.json"
        return json.loads(info.read_text()).get("features") or {} if path.is_dir() and info.is_file() else {}
    except (ValueError, AttributeError) as err:
        raise DataError(f"unreadable datasets feature metadata ({err})", path=path) from None


def _label_names(feature: Any) -> list[str] | None:
    """A ``ClassLabel``'s names, also inside ``Sequence`` / ``List`` / ``LargeList``; else None."""
    if not isinstance(feature, dict):
        return None
    if feature.get("_type") == "ClassLabel" and isinstance(feature.get("names"), list):
        return [str(name) for name in feature["names"]]
    if feature.get("_type") in ("Sequence", "List", "LargeList"):
        return _label_names(feature.get("feature"))
    return None


def class_label_names(path: str | Path) -> dict[str, list[str]]:
    """``{column: names}`` of the ``datasets.ClassLabel`` columns (or lists of them, e.g.
    conll2003's ``ner_tags``) of a columnar file or ``save_to_disk`` directory, from the feature
    metadata ``datasets`` writes with it; {} for a file without that metadata."""
    path = Path(path)
    names = {column: _label_names(feature) for column, feature in _features(path).items()}
    return {column: found for column, found in names.items() if found is not None}


def iter_rows(path: str | Path, columns: list[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(row_number, {column: value})`` of a columnar file or directory, 1-based, streamed
    one record batch at a time. A column asked for that the file lacks raises a DataError
    naming the file, the column and the columns there are."""
    path = Path(path)
    kind = container_of(path)
    if kind is None:
        raise DataError("not a parquet / Arrow file or datasets.save_to_disk directory", path=path)
    files = _hf_files(path) if kind == "hf-dataset" else [path]
    row = 0
    for file in files or []:
        names = column_names(file)
        missing = [c for c in columns or [] if c not in names]
        if missing:
            raise DataError(f"no column {missing[0]!r} (columns: {names})", path=file, value=missing[0])
        for batch in _batches(file, container_of(file) or "arrow-stream", columns):
            for record in batch.to_pylist():
                row += 1
                yield row, record
