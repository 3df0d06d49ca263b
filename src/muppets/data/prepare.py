"""``muppets data prepare``: raw text files → sentence-split, tokenized, memory-mapped corpus.

The pipeline streams in one direction::

    iter_documents (main process, streaming) → chunks of documents
        → workers: split_sentences + tokenizer.encode_text_batch → flat numpy arrays
        → ShardWriter (main process, appends) → tokens.bin / sentences.bin / documents.bin
                                                   (+ units.bin: masking units, when asked)

Chunks go to a ``ProcessPoolExecutor`` in order with at most ``2 × workers`` chunks in flight,
so memory stays flat however large the input is. (``Executor.map`` and ``Pool.imap`` are not
used because they drain the input iterator eagerly — the whole corpus would end up queued in
memory.) On an error the chunks not yet started are cancelled and the workers exit normally;
``multiprocessing.Pool`` is not used because its ``terminate()`` on the way out of an error can
deadlock when its task-handler thread is blocked writing to the workers' queue.
Chunking depends only on the input, and results are written in input order, so the output is
byte-identical for any number of workers.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from muppets.data.readers import ReadStats, input_bytes, iter_documents, list_files, part_range
from muppets.data.sentences import split_sentences
from muppets.data.shards import ShardWriter, tokenizer_fingerprint
from muppets.data.units import UnitMarker, UnitSpec
from muppets.errors import ConfigError, DataError
from muppets.progress import progress_bar

__all__ = ["CorpusTokenizer", "PrepareSummary", "prepare_corpus", "SPECIALS_AS_TEXT", "reads_specials_as_text",
           "SOURCE_FILES", "PART", "source_files", "source_difference", "check_part"]

logger = logging.getLogger(__name__)

SPECIALS_AS_TEXT = "special_strings_as_text"  # meta.json: special-token strings in the text were encoded as text
SOURCE_FILES = "source_files"  # meta.json: [{path (resolved), size, mtime_ns}] of every input file read
PART = "part"  # meta.json of one part of a corpus prepared on several machines (muppets.data.merge)
Chunk = list[list[str]]  # documents, each a list of paragraphs
Encoded = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]  # tokens (T,), lengths (S,), counts (D,), units (T,)


class CorpusTokenizer(Protocol):
    """What the pipeline needs from a tokenizer (e.g. ``WordPieceTokenizer``).

    Corpus text is text: a special token's string in it (``[MASK]``, ``<|endoftext|>``) must
    come out as ordinary tokens, or it would become an MLM target or a false document end. A
    tokenizer whose ``encode_batch`` maps such strings to their special ids (WordPiece and
    byte-level BPE do, as transformers does) also has ``encode_text_batch(texts)``, which reads
    them as text; the pipeline uses it where it exists (see :func:`encode_chunk`).
    """

    vocab_size: int

    def to_json(self) -> str: ...

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...  # no special tokens added


@dataclass
class PrepareSummary:
    """What :func:`prepare_corpus` did."""

    out_dir: Path
    files: int  # input files read
    bytes: int  # input bytes
    documents: int  # documents written
    sentences: int  # sentences written
    tokens: int  # tokens written
    empty_documents: int  # documents dropped: no text, or no token after splitting
    skipped_files: int  # empty files skipped (errors != "strict")
    skipped_lines: int  # undecodable/malformed lines skipped (errors != "strict")
    replaced: int  # undecodable byte sequences replaced (errors="replace")
    seconds: float  # wall-clock time
    part: tuple[int, int] | None = None  # (I, N): part I of N (muppets.data.merge joins them)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def prepare_corpus(
    inputs: Iterable[str | Path] | str | Path,
    tokenizer: CorpusTokenizer,
    out_dir: str | Path,
    *,
    fmt: str = "auto",
    workers: int | None = None,
    batch_docs: int = 64,
    batch_chars: int = 1_000_000,
    errors: str = "strict",
    text_field: str = "text",
    progress: bool = True,
    overwrite: bool = False,
    tokenizer_factory: Callable[[str], CorpusTokenizer] | None = None,
    units: UnitSpec | None = None,
    part: tuple[int, int] | None = None,
) -> PrepareSummary:
    """Read, sentence-split and tokenize ``inputs`` into a prepared corpus at ``out_dir``.

    Args:
        inputs: files and/or directories (see :func:`muppets.data.readers.list_files`).
        tokenizer: has ``vocab_size``, ``to_json()`` and ``encode_batch(texts)`` (no specials).
        out_dir: the corpus directory to create (see :mod:`muppets.data.shards`).
        fmt, errors, text_field: passed to :func:`muppets.data.readers.iter_documents`.
        workers: tokenizer processes; ``None`` = number of usable CPUs, 1 = in-process.
        batch_docs, batch_chars: a chunk sent to a worker closes at this many documents or
            characters, whichever comes first (a bigger document is a chunk of its own).
        progress: show progress over input bytes (a bar on a terminal, a log line every 30 s
            elsewhere: :mod:`muppets.progress`).
        overwrite: replace an existing ``out_dir`` (only once the new corpus is complete).
        tokenizer_factory: rebuilds the tokenizer from ``to_json()`` in each worker; must be
            picklable. Default: ``type(tokenizer).from_json``, else ``WordPieceTokenizer.from_json``.
        units: also store masking units (words, phrases, entities: :mod:`muppets.data.units`)
            as ``units.bin``; needs a tokenizer with ``encode_text_with_words`` (WordPiece).
        part: ``(I, N)``: prepare only part I of N (1-based) of the documents, for one of N
            machines (:class:`muppets.data.readers.KeyRange`: a contiguous stretch of the input
            bytes); :func:`muppets.data.merge.merge_parts` joins the N parts into the corpus
            that preparing everything gives, byte for byte. ``meta.json`` records the part.
    """
    started = time.perf_counter()
    inputs = [inputs] if isinstance(inputs, (str, Path)) else list(inputs)
    files = list_files(inputs, fmt)
    sources = source_files(files)
    total_bytes = sum(f["size"] for f in sources)
    workers = workers or _usable_cpus()
    stats = ReadStats()
    keys, part_meta = None, {}
    if part is not None:
        key_bytes = input_bytes(files)
        keys = part_range(*check_part(part), key_bytes)
        part_meta = {PART: {"index": part[0], "count": part[1], "key_range": [keys.lo, keys.hi],
                            "input_bytes": key_bytes, "errors": errors, "text_field": text_field}}
    documents = iter_documents(files, fmt, errors=errors, text_field=text_field, stats=stats, part=keys)
    chunks = chunk_documents(documents, batch_docs, batch_chars)
    tokenizer_json = tokenizer.to_json()
    if units is not None and not hasattr(tokenizer, "encode_text_with_words"):
        raise ConfigError(f"masking units (corpus.segmenter={units.segmenter}) need a WordPiece tokenizer, "
                          f"not {type(tokenizer).__name__}")
    with ShardWriter(out_dir, vocab_size=tokenizer.vocab_size,
                     sources=[str(Path(p).resolve()) for p in inputs],
                     tokenizer_sha256=tokenizer_fingerprint(tokenizer_json),
                     overwrite=overwrite, units=units is not None) as writer:
        with _encoder(tokenizer, tokenizer_json, tokenizer_factory, workers, units) as encode_all:
            _write_all(writer, encode_all(chunks), stats, total_bytes if keys is None else keys.span(key_bytes),
                       progress)
        extra = {} if units is None else {"units": units.describe()}
        writer.finish({"skipped": _skipped(stats), "files": stats.files,
                       "input_bytes": total_bytes, "input_format": fmt, SPECIALS_AS_TEXT: True,
                       SOURCE_FILES: sources, **extra, **part_meta})
    summary = _summarize(writer, stats, total_bytes, time.perf_counter() - started)
    summary.part = None if part is None else (part[0], part[1])
    logger.info("prepared %s%s: %d files, %d documents, %d sentences, %d tokens in %.1f s "
                "(%.0f tokens/s)", summary.out_dir, "" if part is None else f" (part {part[0]}/{part[1]})",
                summary.files, summary.documents, summary.sentences, summary.tokens, summary.seconds,
                summary.tokens_per_second)
    return summary


def check_part(part: tuple[int, int]) -> tuple[int, int]:
    """``part`` as ``(I, N)`` with ``1 <= I <= N`` (else :class:`ConfigError`)."""
    try:
        index, count = part
    except (TypeError, ValueError):
        raise ConfigError(f"part must be (I, N), e.g. (2, 3) for the second of three, got {part!r}") from None
    if not (isinstance(index, int) and isinstance(count, int) and not isinstance(index, bool)
            and not isinstance(count, bool) and 1 <= index <= count):
        raise ConfigError(f"part {index}/{count}: I and N are whole numbers with 1 <= I <= N "
                          "(part 1/3 is the first of three)")
    return index, count


def source_files(files: Iterable[Path]) -> list[dict[str, Any]]:
    """What ``meta.json`` records of each input file (:data:`SOURCE_FILES`): its resolved path,
    size and modification time (ns), so that an edited input is not taken for the same."""
    out = []
    for path in files:
        stat = path.stat()
        out.append({"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return out


def source_difference(meta: dict[str, Any], inputs: Iterable[str | Path], fmt: str = "auto") -> str | None:
    """How ``inputs`` differ from what the corpus of ``meta`` was prepared from, as words that
    follow "the corpus was" (None: they do not):
    its ``sources`` as resolved paths (an older ``meta.json`` holds them as typed, resolved here),
    then, where it records them, every file's path, size and modification time."""
    old = {str(Path(p).resolve()) for p in meta.get("sources") or []}
    new = {str(Path(p).resolve()) for p in inputs}
    if old != new:
        return f"prepared from {sorted(old)}, but corpus.inputs names {sorted(new)}"
    if SOURCE_FILES not in meta:
        return None
    try:
        now = {f["path"]: f for f in source_files(list_files(sorted(new), fmt))}
    except (DataError, OSError) as err:
        logger.warning("cannot compare the inputs with those the corpus was prepared from (%s); reusing it", err)
        return None
    then = {f["path"]: f for f in meta[SOURCE_FILES]}
    changed = sorted(p for p in set(now) & set(then) if now[p] != then[p])
    if changed:
        f, g = then[changed[0]], now[changed[0]]
        return (f"prepared from {changed[0]}, which changed since (size {f['size']} -> {g['size']} bytes, modified "
                f"{_when(f['mtime_ns'])} -> {_when(g['mtime_ns'])})"
                + (f", and {len(changed) - 1} more files" if len(changed) > 1 else ""))
    added, gone = sorted(set(now) - set(then)), sorted(set(then) - set(now))
    if added:
        return f"prepared without {added[:3]}, which the inputs now hold ({len(added)} files)"
    if gone:
        return f"prepared from {gone[:3]} too, which the inputs no longer hold ({len(gone)} files)"
    return None


def _when(mtime_ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime_ns / 1e9)) + f".{mtime_ns % 10**9:09d}"


def reads_specials_as_text(meta: dict[str, Any], tokenizer: CorpusTokenizer) -> bool:
    """Whether the corpus whose ``meta.json`` is ``meta`` has special-token strings in its text
    encoded as text (as :func:`encode_chunk` does) for ``tokenizer``. Corpora prepared before
    ``meta.json`` recorded :data:`SPECIALS_AS_TEXT` did not, where the tokenizer's
    ``encode_batch`` maps such strings to special ids (the tokenizers with ``encode_text_batch``);
    a word vocabulary never read them as one, so its older corpora are the same."""
    return bool(meta.get(SPECIALS_AS_TEXT)) or not hasattr(tokenizer, "encode_text_batch")


def chunk_documents(documents: Iterable[Any], batch_docs: int,
                    batch_chars: int) -> Iterator[Chunk]:
    """Group documents' paragraph lists into chunks of <= batch_docs docs / ~batch_chars chars."""
    if batch_docs < 1 or batch_chars < 1:
        raise ValueError(f"batch_docs and batch_chars must be >= 1, got {batch_docs}, "
                         f"{batch_chars}")
    chunk: Chunk = []
    chars = 0
    for doc in documents:
        chunk.append(doc.paragraphs)
        chars += sum(map(len, doc.paragraphs))
        if len(chunk) >= batch_docs or chars >= batch_chars:
            yield chunk
            chunk, chars = [], 0
    if chunk:
        yield chunk


def encode_chunk(tokenizer: CorpusTokenizer, chunk: Chunk, marker: UnitMarker | None = None) -> Encoded:
    """Split a chunk's paragraphs into sentences and tokenize them as plain text, flat.

    Returns:
        tokens (T,) uint32, sentence_lengths (S,) int64, doc_sentence_counts (D,) int64, and
        with a ``marker`` the unit-start bits (T,) uint8 of :mod:`muppets.data.units` (else None).
    """
    sentences: list[str] = []
    counts = np.zeros(len(chunk), dtype=np.int64)  # (D,)
    for d, paragraphs in enumerate(chunk):
        before = len(sentences)
        for paragraph in paragraphs:
            sentences.extend(split_sentences(paragraph))
        counts[d] = len(sentences) - before
    flags = None
    if marker is not None:
        encodings = tokenizer.encode_text_with_words(sentences) if sentences else []  # type: ignore[attr-defined]
        ids = [enc.ids for enc in encodings]
        flags = np.concatenate([marker.flags(text, enc.offsets, enc.word_ids)
                                for text, enc in zip(sentences, encodings)] or [np.zeros(0, np.uint8)])
    else:
        encode = getattr(tokenizer, "encode_text_batch", tokenizer.encode_batch)  # see CorpusTokenizer
        ids = encode(sentences) if sentences else []
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))  # (S,)
    tokens = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.uint32,
                         count=int(lengths.sum()))  # (T,)
    return tokens, lengths, counts, flags


def _write_all(writer: ShardWriter, results: Iterator[Encoded], stats: ReadStats,
               total_bytes: int, progress: bool) -> None:
    with progress_bar(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024, desc="prepare",
                      enabled=progress) as bar:
        for tokens, lengths, counts, units in results:
            writer.add_encoded(tokens, lengths, counts, units)
            bar.update(stats.bytes_read - bar.n)
            bar.set_postfix(docs=writer.num_documents, tokens=writer.num_tokens, refresh=False)


# ----------------------------------------------------------------------------- workers

_WORKER_TOKENIZER: CorpusTokenizer | None = None
_WORKER_MARKER: UnitMarker | None = None


def _init_worker(factory: Callable[[str], CorpusTokenizer], tokenizer_json: str,
                 units: UnitSpec | None = None) -> None:
    global _WORKER_TOKENIZER, _WORKER_MARKER
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker process
    _WORKER_TOKENIZER = factory(tokenizer_json)
    _WORKER_MARKER = None if units is None else UnitMarker(units, _script_converter(_WORKER_TOKENIZER))


def _script_converter(tokenizer: CorpusTokenizer) -> Callable[[str], str] | None:
    """The tokenizer's script conversion, if it has one (WordPiece's ``chinese_script``)."""
    return getattr(tokenizer, "script_converter", None)


def _encode_in_worker(chunk: Chunk) -> Encoded:
    assert _WORKER_TOKENIZER is not None, "worker not initialised"
    return encode_chunk(_WORKER_TOKENIZER, chunk, _WORKER_MARKER)


@contextmanager
def _encoder(tokenizer: CorpusTokenizer, tokenizer_json: str,
             factory: Callable[[str], CorpusTokenizer] | None, workers: int,
             units: UnitSpec | None = None) -> Iterator[Callable[[Iterable[Chunk]], Iterator[Encoded]]]:
    """Yield ``encode_all(chunks) -> results in order``: in-process or over a worker pool."""
    if workers <= 1:
        marker = None if units is None else UnitMarker(units, _script_converter(tokenizer))
        yield partial(map, partial(encode_chunk, tokenizer, marker=marker))
        return
    factory = factory or _default_factory(tokenizer)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(),
                             initializer=_init_worker, initargs=(factory, tokenizer_json, units)) as pool:
        try:
            yield partial(_bounded_imap, pool, _encode_in_worker, max_in_flight=2 * workers)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)  # queued chunks are dropped, not encoded
            raise


def _bounded_imap(pool: Executor, func: Callable[[Chunk], Encoded], items: Iterable[Chunk], *,
                  max_in_flight: int) -> Iterator[Encoded]:
    """Like ``pool.map(func, items)`` (ordered) but never more than max_in_flight submitted."""
    pending: deque[Future[Encoded]] = deque()
    for item in items:
        pending.append(pool.submit(func, item))
        if len(pending) >= max_in_flight:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def _default_factory(tokenizer: CorpusTokenizer) -> Callable[[str], CorpusTokenizer]:
    from_json = getattr(type(tokenizer), "from_json", None)
    return from_json if callable(from_json) else _wordpiece_from_json


def _wordpiece_from_json(tokenizer_json: str) -> CorpusTokenizer:
    from muppets.tokenizers.wordpiece import WordPieceTokenizer

    return WordPieceTokenizer.from_json(tokenizer_json)


def _usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


# ----------------------------------------------------------------------------- summary


def _skipped(stats: ReadStats) -> dict[str, int]:
    return {"empty_documents_read": stats.empty_documents, "empty_files": stats.skipped_files,
            "bad_lines": stats.skipped_lines, "replaced_byte_sequences": stats.replaced}


def _summarize(writer: ShardWriter, stats: ReadStats, total_bytes: int,
               seconds: float) -> PrepareSummary:
    return PrepareSummary(
        out_dir=writer.out_dir, files=stats.files, bytes=total_bytes,
        documents=writer.num_documents, sentences=writer.num_sentences,
        tokens=writer.num_tokens,
        empty_documents=stats.empty_documents + writer.empty_documents,
        skipped_files=stats.skipped_files, skipped_lines=stats.skipped_lines,
        replaced=stats.replaced, seconds=seconds,
    )
