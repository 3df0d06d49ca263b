"""The prepared-corpus format: flat token ids + sentence and document offsets, memory-mapped.

A prepared corpus is one directory::

    tokens.bin      (N,) token ids, little-endian uint16 if vocab_size <= 65535 else uint32
    sentences.bin   (S,) int64 end offsets into tokens:  sentence i = tokens[ends[i-1]:ends[i]]
    documents.bin   (D,) int64 end offsets into sentences: document d = sentences[ends[d-1]:ends[d]]
    units.bin       (N,) uint8, optional: per token, the masking units it starts (bits of
                    :data:`muppets.data.units.UNIT_BITS`; ``meta.json`` describes them under ``units``)
    meta.json       format + version, dtype, vocab_size, counts, tokenizer fingerprint, sources,
                    skipped/empty counts, creation time (written last)

(``ends[-1]`` is taken as 0.) Every sentence has at least one token and every document at
least one sentence: the writer drops empty ones and counts them. :class:`ShardWriter` appends
incrementally, so memory stays flat, into a hidden sibling directory that is renamed into place
only when everything (``meta.json`` last) is written; an interrupted run leaves no half corpus.
:class:`TokenCorpus` opens the files read-only with ``np.memmap``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import numpy as np

from muppets.config import begin_dir, replace_dir
from muppets.errors import DataError

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "token_dtype", "tokenizer_fingerprint", "corpus_meta",
           "ShardWriter", "TokenCorpus", "TokenStream", "FramedTokens", "DocumentStream"]

logger = logging.getLogger(__name__)

FORMAT_NAME = "muppets-token-corpus"
FORMAT_VERSION = 1
TOKENS_FILE = "tokens.bin"
SENTENCES_FILE = "sentences.bin"
DOCUMENTS_FILE = "documents.bin"
META_FILE = "meta.json"
UNITS_FILE = "units.bin"  # optional: masking units (muppets.data.units)
OFFSET_DTYPE = np.dtype("<i8")
_DOCUMENT_CACHES = ("document_ends", "doc_sentence_bounds", "document_token_ends")  # what regrouping replaces


def token_dtype(vocab_size: int) -> np.dtype:
    """``uint16`` when every id fits (vocab_size <= 65535), else ``uint32`` (little-endian)."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    return np.dtype("<u2") if vocab_size <= 65535 else np.dtype("<u4")


def tokenizer_fingerprint(tokenizer_json: str) -> str:
    """sha256 hex digest of the tokenizer's JSON serialisation."""
    return hashlib.sha256(tokenizer_json.encode("utf-8")).hexdigest()


class ShardWriter:
    """Append tokenized documents to a new corpus directory, published atomically on success.

    Use as a context manager: leaving the block normally publishes the corpus (see
    :meth:`finish`); leaving it with an exception deletes the partial output.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()) / "corpus"
    >>> with ShardWriter(out, vocab_size=100) as writer:
    ...     writer.add_document([[5, 6, 7], [], [8]])
    ...     writer.add_document([[]])
    True
    False
    >>> corpus = TokenCorpus(out)
    >>> corpus.num_documents, corpus.num_sentences, corpus.sentence(1).tolist()
    (1, 2, [8])
    """

    def __init__(self, out_dir: str | Path, *, vocab_size: int, tokenizer_sha256: str = "",
                 sources: Sequence[str] = (), overwrite: bool = False, units: bool = False) -> None:
        self.out_dir = Path(out_dir)
        self.vocab_size = vocab_size
        self.dtype = token_dtype(vocab_size)
        self.overwrite = overwrite
        self._check_target()
        self._meta: dict[str, Any] = {"tokenizer_sha256": tokenizer_sha256,
                                      "sources": [str(s) for s in sources]}
        self.num_tokens = self.num_sentences = self.num_documents = 0
        self.empty_sentences = self.empty_documents = 0
        self.tmp_dir = begin_dir(self.out_dir)  # and removes what killed writes of out_dir left
        self.units = units  # add_encoded takes a units.bin flag per token
        self._files: dict[str, BinaryIO] = {
            name: open(self.tmp_dir / name, "wb", buffering=1 << 20)
            for name in (TOKENS_FILE, SENTENCES_FILE, DOCUMENTS_FILE) + ((UNITS_FILE,) if units else ())
        }
        self.finished = False

    def _check_target(self) -> None:
        """Refuse an existing ``out_dir`` unless asked to replace it, and even then anything but
        a prepared corpus or an empty directory: a user's own files are never deleted."""
        out = self.out_dir
        if not out.exists():
            return
        if not self.overwrite:
            raise DataError("output directory already exists (--overwrite, or overwrite=True, replaces a "
                            "prepared corpus)", path=out)
        if not out.is_dir():
            raise DataError("is a file, not a corpus directory; it is left as it is: choose another output",
                            path=out)
        if corpus_meta(out) is None and any(out.iterdir()):
            raise DataError(f"holds files but is not a prepared corpus (no {META_FILE} whose format is "
                            f"{FORMAT_NAME}), so it is not replaced: choose another output directory", path=out)

    def add_document(self, sentences: Sequence[Sequence[int]]) -> bool:
        """Append one document given as token-id lists; False if it was empty (not written)."""
        lengths = np.array([len(s) for s in sentences], dtype=np.int64)
        flat = [t for s in sentences for t in s]
        before = self.num_documents
        self.add_encoded(np.array(flat, dtype=np.int64), lengths, np.array([len(sentences)]))
        return self.num_documents > before

    def add_encoded(self, tokens: np.ndarray, sentence_lengths: np.ndarray,
                    doc_sentence_counts: np.ndarray, units: np.ndarray | None = None) -> None:
        """Append a batch of documents in flat form.

        Args:
            tokens: (T,) ids of all sentences of all documents, concatenated.
            sentence_lengths: (S,) tokens per sentence, summing to T (zeros are dropped).
            doc_sentence_counts: (D,) sentences per document, summing to S (documents left
                without sentences are dropped and counted).
            units: (T,) uint8 unit-start bits of the tokens; given exactly when the writer was
                opened with ``units=True``.
        """
        lengths = np.asarray(sentence_lengths, dtype=np.int64)
        counts = np.asarray(doc_sentence_counts, dtype=np.int64)
        assert lengths.sum() == len(tokens) and counts.sum() == len(lengths), "inconsistent batch"
        assert (units is not None) == self.units and (units is None or len(units) == len(tokens)), "units per token"
        doc_of_sentence = np.repeat(np.arange(len(counts)), counts)  # (S,)
        keep = lengths > 0
        counts = np.bincount(doc_of_sentence[keep], minlength=len(counts))  # (D,)
        self.empty_sentences += int((~keep).sum())
        self.empty_documents += int((counts == 0).sum())
        self._write_tokens(np.asarray(tokens))
        if units is not None:
            self._files[UNITS_FILE].write(np.asarray(units, dtype=np.uint8).tobytes())
        self._write_offsets(SENTENCES_FILE, lengths[keep], self.num_tokens)
        self._write_offsets(DOCUMENTS_FILE, counts[counts > 0], self.num_sentences)
        self.num_tokens += len(tokens)
        self.num_sentences += int(keep.sum())
        self.num_documents += int((counts > 0).sum())

    def _write_tokens(self, tokens: np.ndarray) -> None:
        if len(tokens) and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            bad = tokens[(tokens < 0) | (tokens >= self.vocab_size)][0]
            raise DataError(f"token id outside the vocabulary (vocab_size={self.vocab_size})",
                            value=int(bad))
        self._files[TOKENS_FILE].write(tokens.astype(self.dtype, copy=False).tobytes())

    def _write_offsets(self, name: str, sizes: np.ndarray, base: int) -> None:
        ends = base + np.cumsum(sizes, dtype=np.int64)
        self._files[name].write(ends.astype(OFFSET_DTYPE, copy=False).tobytes())

    def finish(self, extra_meta: dict[str, Any] | None = None) -> Path:
        """Close the files, write ``meta.json`` atomically, move the directory into place."""
        for fh in self._files.values():
            fh.close()
        meta = self._build_meta(extra_meta or {})
        tmp_meta = self.tmp_dir / (META_FILE + ".tmp")
        tmp_meta.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp_meta, self.tmp_dir / META_FILE)
        self._publish()
        self.finished = True
        logger.info("wrote %s: %d documents, %d sentences, %d tokens", self.out_dir,
                    self.num_documents, self.num_sentences, self.num_tokens)
        return self.out_dir

    def _build_meta(self, extra: dict[str, Any]) -> dict[str, Any]:
        extra = dict(extra)
        skipped = {"empty_sentences": self.empty_sentences,
                   "empty_documents": self.empty_documents, **extra.pop("skipped", {})}
        return {
            "format": FORMAT_NAME, "format_version": FORMAT_VERSION,
            "dtype": self.dtype.name, "offset_dtype": OFFSET_DTYPE.name,
            "vocab_size": self.vocab_size, "num_documents": self.num_documents,
            "num_sentences": self.num_sentences, "num_tokens": self.num_tokens,
            **self._meta, "skipped": skipped, **extra,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }

    def _publish(self) -> None:
        """Rename the finished temporary directory to ``out_dir`` (replacing it if allowed)."""
        self._check_target()
        replace_dir(self.tmp_dir, self.out_dir)

    def abort(self) -> None:
        """Close and delete the partial output (nothing appears at ``out_dir``)."""
        for fh in self._files.values():
            fh.close()
        shutil.rmtree(self.tmp_dir, ignore_errors=True)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None:
            self.abort()
        elif not self.finished:
            try:
                self.finish()
            except BaseException:
                self.abort()
                raise


class TokenCorpus:
    """A prepared corpus opened read-only (memory-mapped): walk documents sentence by sentence.

    Attributes:
        tokens: (N,) token ids (uint16/uint32 memmap).
        sentence_ends: (S,) int64 end offset of each sentence in ``tokens``.
        document_ends: (D,) int64 end offset of each document in the sentences (a
            :meth:`regrouped` view's own documents, pieces of the stored ones).
        meta: the parsed ``meta.json``.
        units: (N,) uint8 unit-start bits of every token (memmap), or None when the corpus was
            prepared without masking units (see :mod:`muppets.data.units`).
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.meta = _read_meta(self.directory)
        dtype = np.dtype(self.meta["dtype"]).newbyteorder("<")
        self.tokens = _open_array(self.directory / TOKENS_FILE, dtype, self.meta["num_tokens"])
        self.sentence_ends = _open_array(self.directory / SENTENCES_FILE, OFFSET_DTYPE,
                                         self.meta["num_sentences"])
        self.document_ends = _open_array(self.directory / DOCUMENTS_FILE, OFFSET_DTYPE,
                                         self.meta["num_documents"])
        self.units = (_open_array(self.directory / UNITS_FILE, np.dtype("u1"), self.meta["num_tokens"])
                      if "units" in self.meta else None)
        _check_last(self.directory / SENTENCES_FILE, self.sentence_ends, len(self.tokens))
        _check_last(self.directory / DOCUMENTS_FILE, self.document_ends,
                    len(self.sentence_ends))
        self.is_regrouped = False  # True for a view with other documents (:meth:`regrouped`)

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    @property
    def num_sentences(self) -> int:
        return len(self.sentence_ends)

    @property
    def num_documents(self) -> int:
        return len(self.document_ends)

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    def __len__(self) -> int:
        return self.num_documents

    def document_sentences(self, d: int) -> range:
        """The sentence indices of document ``d``."""
        _check_index("document", d, self.num_documents)
        start = int(self.document_ends[d - 1]) if d > 0 else 0
        return range(start, int(self.document_ends[d]))

    def sentence(self, i: int) -> np.ndarray:
        """(L,) token ids of sentence ``i`` (a read-only view of the memmap)."""
        _check_index("sentence", i, self.num_sentences)
        start = int(self.sentence_ends[i - 1]) if i > 0 else 0
        return self.tokens[start:int(self.sentence_ends[i])]

    def document_tokens(self, d: int) -> np.ndarray:
        """(L,) token ids of all sentences of document ``d``, concatenated."""
        sentences = self.document_sentences(d)
        start = int(self.sentence_ends[sentences.start - 1]) if sentences.start > 0 else 0
        return self.tokens[start:int(self.sentence_ends[sentences.stop - 1])]

    @cached_property
    def sentence_lengths(self) -> np.ndarray:
        """(S,) int64 number of tokens of each sentence."""
        return np.diff(self.sentence_ends, prepend=np.int64(0))

    @cached_property
    def doc_sentence_bounds(self) -> np.ndarray:
        """(D, 2) int64 ``[start, stop)`` sentence indices of each document."""
        starts = np.concatenate([[0], self.document_ends[:-1]]).astype(np.int64)
        return np.stack([starts, np.asarray(self.document_ends, dtype=np.int64)], axis=1)

    @cached_property
    def document_token_ends(self) -> np.ndarray:
        """(D,) int64 end offset of each document in ``tokens``."""
        return np.asarray(self.sentence_ends[np.asarray(self.document_ends) - 1], dtype=np.int64)

    def count_tokens(self, docs: np.ndarray | None = None, minlength: int = 0,
                     chunk_tokens: int = 1 << 18) -> np.ndarray:
        """``(max(vocab_size, minlength),)`` int64 occurrences of every id in documents ``docs``
        (all when None), counted ``chunk_tokens`` at a time: no copy of more than one chunk is
        ever made. The chunks are read from the file rather than through the memory map, so that
        a pass over the corpus leaves it in the page cache but not in this process' RSS."""
        counts = np.zeros(max(self.vocab_size, minlength), dtype=np.int64)
        path, dtype = self.directory / TOKENS_FILE, self.tokens.dtype
        for start, stop in self._token_runs(docs):
            for lo in range(start, stop, chunk_tokens):
                chunk = np.fromfile(path, dtype=dtype, count=min(chunk_tokens, stop - lo), offset=lo * dtype.itemsize)
                counts += np.bincount(chunk, minlength=len(counts))
        return counts

    def _token_runs(self, docs: np.ndarray | None) -> list[tuple[int, int]]:
        """``[start, stop)`` token ranges of documents ``docs``, adjacent documents merged."""
        if docs is None:
            return [(0, self.num_tokens)]
        docs = np.asarray(docs, dtype=np.int64)
        if len(docs) == 0:
            return []
        ends = self.document_token_ends
        starts, stops = np.where(docs > 0, ends[np.maximum(docs - 1, 0)], 0), ends[docs]  # (n,) each
        first = np.flatnonzero(np.concatenate([[True], starts[1:] != stops[:-1]]))  # (R,) run starts
        last = np.append(first[1:], len(docs)) - 1
        return list(zip(starts[first].tolist(), stops[last].tolist()))

    def regrouped(self, document_ends: np.ndarray) -> TokenCorpus:
        """The same tokens and sentences grouped into other documents (pieces of the stored
        ones, e.g. :func:`muppets.data.heldout.split_corpus`'s blocks): ``document_ends`` (D',)
        increasing sentence end offsets, the last one ``num_sentences``. The memory maps are
        shared; nothing is written."""
        ends = np.asarray(document_ends, dtype=np.int64)
        assert len(ends) and ends[-1] == self.num_sentences and (np.diff(ends) > 0).all() and ends[0] > 0, \
            "document ends must rise to the number of sentences"
        view = object.__new__(TokenCorpus)
        view.__dict__.update({k: v for k, v in self.__dict__.items() if k not in _DOCUMENT_CACHES})
        view.document_ends, view.is_regrouped = ends, True
        return view

    def __getstate__(self) -> dict[str, Any]:
        state: dict[str, Any] = {"directory": self.directory}  # re-map in the receiving process, never copy
        if self.is_regrouped:
            state["document_ends"] = self.document_ends
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["directory"])
        if "document_ends" in state:
            self.__dict__.update(self.regrouped(state["document_ends"]).__dict__)

    def __repr__(self) -> str:
        return (f"TokenCorpus({str(self.directory)!r}, documents={self.num_documents}, "
                f"sentences={self.num_sentences}, tokens={self.num_tokens}, "
                f"dtype={self.tokens.dtype.name})")


class TokenStream:
    """A sequence of token ids read in place: ``len(s)``, ``s[i]``, ``s[a:b]`` (an int64 copy of
    just that slice) and :meth:`ids` at any positions; subclasses say how positions map to ids."""

    def __len__(self) -> int:
        raise NotImplementedError

    def ids(self, positions: np.ndarray) -> np.ndarray:
        """int64 ids at ``positions`` (any shape, each in ``[0, len)``), same shape."""
        raise NotImplementedError

    def slice(self, start: int, stop: int) -> np.ndarray:
        """``(stop - start,)`` int64 ids of positions ``[start, stop)`` (``0 <= start <= stop <= len``)."""
        return self.ids(np.arange(start, stop, dtype=np.int64))

    def __getitem__(self, index: int | slice) -> np.ndarray | np.int64:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise ValueError("a token stream is sliced with step 1 only")
            return self.slice(start, max(start, stop))
        i = index + len(self) if index < 0 else index
        _check_index("position", i, len(self))
        return self.ids(np.array([i], dtype=np.int64))[0]


class FramedTokens(TokenStream):
    """The corpus' tokens, every sentence (or document) framed by ``bos`` / ``eos``, read in place.

    Units (sentences, or documents) follow one another, unit ``i`` as ``[bos] + its tokens +
    [eos]`` (``bos`` / ``eos`` only when given): with documents and ``eos`` the stream GPT packs,
    with sentences, ``<s>`` and ``</s>`` the one ELMo reads. Nothing of the stream's size is
    built: unit ``i`` ends at ``token_end(i) + frame * (i + 1)`` (``frame`` ids per unit), so a
    position's unit is found in the memory-mapped unit ends (through an index of every
    ``BLOCK``-th unit: 8 bytes per ``BLOCK`` units), and ids are read from the token memmap
    when asked for.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()) / "corpus"
    >>> with ShardWriter(out, vocab_size=100) as writer:
    ...     writer.add_document([[5, 6, 7], [8]])
    ...     writer.add_document([[9]])
    True
    True
    >>> framed = FramedTokens(TokenCorpus(out), "sentence", bos=2, eos=3)
    >>> framed[:].tolist(), framed.document_spans([0, 1]).tolist()
    ([2, 5, 6, 7, 3, 2, 8, 3, 2, 9, 3], [[0, 8], [8, 11]])
    >>> DocumentStream(FramedTokens(TokenCorpus(out), "document", eos=1), [1, 0])[:].tolist()
    [9, 1, 5, 6, 7, 8, 1]
    """

    BLOCK = 64  # units per entry of the in-memory index

    def __init__(self, corpus: TokenCorpus, unit: str = "sentence", bos: int | None = None,
                 eos: int | None = None) -> None:
        if unit not in ("sentence", "document"):
            raise ValueError(f"unit must be 'sentence' or 'document', got {unit!r}")
        self.corpus, self.unit, self.bos, self.eos = corpus, unit, bos, eos
        # (U,) token end of each unit: the sentence memmap itself, or (D,) document ends; plain
        # ndarray views (no copy) index faster than np.memmap
        self.ends = np.asarray(corpus.sentence_ends if unit == "sentence" else corpus.document_token_ends)
        self._tokens = np.asarray(corpus.tokens)
        self.lead = int(bos is not None)  # ids before a unit's tokens
        self.frame = self.lead + int(eos is not None)  # ids added per unit
        U, B = len(self.ends), self.BLOCK
        self._index = self.stream_ends(np.minimum(np.arange(B - 1, U + B - 1, B), U - 1))  # (ceil(U / B),)

    def __len__(self) -> int:
        return self.corpus.num_tokens + self.frame * len(self.ends)

    def stream_ends(self, units: np.ndarray) -> np.ndarray:
        """Position one past each of ``units`` in the stream."""
        units = np.asarray(units, dtype=np.int64)
        return self.ends[units] + self.frame * (units + 1)

    def token_starts(self, units: np.ndarray) -> np.ndarray:
        """Token offset where each of ``units`` begins (``units == U`` gives the corpus end)."""
        units = np.asarray(units, dtype=np.int64)
        return np.where(units > 0, self.ends[np.maximum(units - 1, 0)], 0)

    def unit_starts(self, units: np.ndarray) -> np.ndarray:
        """Position where each of ``units`` begins in the stream (its ``bos`` or first token)."""
        units = np.asarray(units, dtype=np.int64)
        return self.token_starts(units) + self.frame * units

    def units_at(self, positions: np.ndarray) -> np.ndarray:
        """The unit holding each position: the first ``i`` with ``stream_ends(i) > p``."""
        p = np.asarray(positions, dtype=np.int64)
        lo = np.searchsorted(self._index, p, side="right") * self.BLOCK  # the answer's block
        hi = np.minimum(lo + self.BLOCK - 1, len(self.ends) - 1)
        while (open_ := lo < hi).any():  # vectorised bisection inside the block
            mid = (lo + hi) // 2
            right = self.stream_ends(mid) <= p
            lo, hi = np.where(open_ & right, mid + 1, lo), np.where(open_ & ~right, mid, hi)
        return lo

    def ids(self, positions: np.ndarray) -> np.ndarray:
        p = np.asarray(positions, dtype=np.int64)
        return self._read(p, self.units_at(p)) if p.size else np.zeros(p.shape, np.int64)

    def slice(self, start: int, stop: int) -> np.ndarray:
        if stop <= start:
            return np.zeros(0, np.int64)
        block = int(np.searchsorted(self._index, start, side="right")) * self.BLOCK
        first = block + int(np.searchsorted(self.stream_ends(np.arange(block, min(block + self.BLOCK, len(self.ends)))),
                                            start, side="right"))  # units_at(start), without a loop
        # every unit holds a token, so the slice spans at most stop - start units
        units = np.arange(first, min(first + stop - start, len(self.ends)))
        p = np.arange(start, stop, dtype=np.int64)
        return self._read(p, first + np.searchsorted(self.stream_ends(units), p, side="right"))

    def _read(self, p: np.ndarray, units: np.ndarray) -> np.ndarray:
        """int64 ids at positions ``p`` whose units are ``units`` (same shape)."""
        start = self.token_starts(units)
        offset = p - start - self.frame * units - self.lead  # index into the unit's tokens
        inside = np.minimum(start + offset, self.corpus.num_tokens - 1)  # framing ids read a neighbour
        out = self._tokens[inside].astype(np.int64)
        if self.bos is not None:
            out[offset < 0] = self.bos
        if self.eos is not None:
            out[offset >= self.ends[units] - start] = self.eos
        return out

    def document_spans(self, docs: np.ndarray) -> np.ndarray:
        """(n, 2) int64 ``[start, stop)`` of documents ``docs`` in the stream."""
        docs = np.asarray(docs, dtype=np.int64)
        if self.unit == "document":
            first, stop = docs, docs + 1
        else:
            first, stop = self.corpus.doc_sentence_bounds[docs].T
        return np.stack([self.unit_starts(first), self.unit_starts(stop)], axis=1).reshape(-1, 2)

    def counts(self, docs: np.ndarray | None = None, minlength: int = 0) -> np.ndarray:
        """int64 occurrences of every id in documents ``docs`` (all when None), ``bos`` and
        ``eos`` included (see :meth:`TokenCorpus.count_tokens`)."""
        counts = self.corpus.count_tokens(docs, minlength)
        if docs is None:
            units = len(self.ends)
        elif self.unit == "document":
            units = len(docs)
        else:
            bounds = self.corpus.doc_sentence_bounds[np.asarray(docs, dtype=np.int64)]
            units = int((bounds[:, 1] - bounds[:, 0]).sum())
        for framing in (self.bos, self.eos):
            if framing is not None:
                counts[framing] += units
        return counts


class DocumentStream(TokenStream):
    """Documents ``docs`` of a :class:`FramedTokens` stream laid end to end (in the given order),
    read in place: position ``x`` is ``locate(x)`` in the framed stream."""

    def __init__(self, framed: FramedTokens, docs: np.ndarray) -> None:
        self.framed, self.docs = framed, np.asarray(docs, dtype=np.int64)
        spans = framed.document_spans(self.docs)  # (n, 2)
        self.starts = spans[:, 0]  # (n,) where each document begins in the framed stream
        self.ends = np.cumsum(spans[:, 1] - spans[:, 0])  # (n,) where each one ends here

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(framed positions, framed starts of their documents)`` of ``positions`` (same shape)."""
        x = np.asarray(positions, dtype=np.int64)
        k = np.searchsorted(self.ends, x, side="right")
        begin = np.where(k > 0, self.ends[np.maximum(k - 1, 0)], 0)  # where document k begins here
        return self.starts[k] + x - begin, self.starts[k]

    def ids(self, positions: np.ndarray) -> np.ndarray:
        return self.framed.ids(self.locate(positions)[0])

    def slice(self, start: int, stop: int) -> np.ndarray:
        pieces, k = [], int(np.searchsorted(self.ends, start, side="right"))
        while start < stop:  # one contiguous framed slice per document touched
            begin, end = (int(self.ends[k - 1]) if k else 0), min(stop, int(self.ends[k]))
            shift = int(self.starts[k]) - begin
            pieces.append(self.framed.slice(start + shift, end + shift))
            start, k = end, k + 1
        return np.concatenate(pieces) if pieces else np.zeros(0, np.int64)

    def counts(self, minlength: int = 0) -> np.ndarray:
        """int64 occurrences of every id in the stream (see :meth:`FramedTokens.counts`)."""
        return self.framed.counts(self.docs, minlength)


def corpus_meta(directory: str | Path) -> dict[str, Any] | None:
    """The ``meta.json`` of the prepared corpus in ``directory``; None where there is none: no
    such file, one that is not JSON, or JSON that does not say it is a corpus (``format``) —
    a user's own ``meta.json`` beside their files."""
    try:
        meta = json.loads((Path(directory) / META_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return meta if isinstance(meta, dict) and meta.get("format") == FORMAT_NAME else None


def _read_meta(directory: Path) -> dict[str, Any]:
    path = directory / META_FILE
    if not directory.is_dir():
        raise DataError("prepared corpus directory not found", path=directory)
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise DataError("missing meta.json: not a prepared corpus (or an unfinished one)",
                        path=path) from err
    except (OSError, ValueError) as err:
        raise DataError(f"unreadable meta.json: {err}", path=path) from err
    if meta.get("format") != FORMAT_NAME or meta.get("format_version") != FORMAT_VERSION:
        raise DataError(f"unsupported corpus format (expected {FORMAT_NAME} version "
                        f"{FORMAT_VERSION})", path=path,
                        value=(meta.get("format"), meta.get("format_version")))
    return meta


def _open_array(path: Path, dtype: np.dtype, count: int) -> np.ndarray:
    """Memory-map ``path`` as ``count`` items of ``dtype``, checking the file size first."""
    if not path.is_file():
        raise DataError("missing corpus file", path=path)
    size = path.stat().st_size
    if size != count * dtype.itemsize:
        raise DataError(f"file has {size} bytes but meta.json promises {count} x "
                        f"{dtype.itemsize} bytes", path=path, value=size)
    if count == 0:
        return np.zeros(0, dtype=dtype)  # mmap cannot map an empty file
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


def _check_last(path: Path, ends: np.ndarray, total: int) -> None:
    last = int(ends[-1]) if len(ends) else 0
    if last != total:
        raise DataError(f"last offset is {last} but the indexed array has {total} items",
                        path=path, value=last)


def _check_index(kind: str, index: int, size: int) -> None:
    if not 0 <= index < size:
        raise IndexError(f"{kind} index {index} out of range [0, {size})")
