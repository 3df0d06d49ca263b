"""``muppets data merge``: the parts of a corpus prepared on several machines → one corpus.

``muppets data prepare … --part I/N`` prepares part I of N of the documents
(:class:`muppets.data.readers.KeyRange`: the parts are contiguous stretches of the document
stream, part 1 first). :func:`merge_parts` checks that the N parts belong together and appends
them in order of their index into a new corpus; since a document's tokens, sentences and masking
units depend only on the document, that corpus is byte for byte the one preparing every input on
one machine gives, and its ``meta.json`` is that one's too (its creation time aside).

Parts belong together when they record the same tokenizer (fingerprint), vocabulary size and
token dtype, masking units (settings and lexicon content), input format, ``errors`` and
``text_field`` settings, number of parts and input files. Input files are compared by name (the
last path component) and size, in order; not by directory or modification time, which differ
between machines that each hold a copy. The merged corpus' ``sources`` and ``source_files``
are those of part 1. Every index from 1 to N must be given once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from muppets.data.prepare import PART, SOURCE_FILES
from muppets.data.readers import part_range
from muppets.data.shards import ShardWriter, TokenCorpus, corpus_meta
from muppets.errors import DataError

__all__ = ["MergeSummary", "merge_parts"]

logger = logging.getLogger(__name__)

BLOCK_TOKENS = 1 << 22  # tokens appended at a time (a bigger document is a block of its own)
_WRITER_KEYS = ("format", "format_version", "dtype", "offset_dtype", "vocab_size", "num_documents",
                "num_sentences", "num_tokens", "tokenizer_sha256", "sources", "skipped", "created")


@dataclass
class MergeSummary:
    """What :func:`merge_parts` did."""

    out_dir: Path
    parts: int
    files: int
    documents: int
    sentences: int
    tokens: int
    seconds: float


def merge_parts(parts: Iterable[str | Path], out_dir: str | Path, *, overwrite: bool = False,
                block_tokens: int = BLOCK_TOKENS) -> MergeSummary:
    """Join the parts of one corpus (directories written by ``prepare_corpus(..., part=(I, N))``,
    in any order) into the corpus at ``out_dir``, published atomically like every corpus
    (:class:`~muppets.data.shards.ShardWriter`: an existing ``out_dir`` only with ``overwrite``,
    and then only a prepared corpus or an empty directory). Parts that do not belong together, a
    missing or repeated index, or a directory that is no part raise :class:`DataError`. Memory
    stays flat: the parts are memory-mapped and copied ``block_tokens`` tokens at a time."""
    started = time.perf_counter()
    ordered = _ordered_parts([Path(p) for p in parts])
    first_dir, first = ordered[0]
    units = "units" in first
    writer = ShardWriter(out_dir, vocab_size=int(first["vocab_size"]), tokenizer_sha256=first["tokenizer_sha256"],
                         sources=first.get("sources") or (), overwrite=overwrite, units=units)
    with writer:
        for directory, _ in ordered:
            corpus = TokenCorpus(directory)
            for tokens, lengths, counts, flags in _blocks(corpus, block_tokens):
                writer.add_encoded(tokens, lengths, counts, flags)
        writer.finish(_merged_meta([meta for _, meta in ordered]))
    expected = sum(int(meta["num_documents"]) for _, meta in ordered)
    assert writer.num_documents == expected, "every stored document is copied once"
    summary = MergeSummary(writer.out_dir, len(ordered), sum(int(m.get("files", 0)) for _, m in ordered),
                           writer.num_documents, writer.num_sentences, writer.num_tokens,
                           time.perf_counter() - started)
    logger.info("merged %d parts into %s: %d documents, %d sentences, %d tokens", summary.parts,
                summary.out_dir, summary.documents, summary.sentences, summary.tokens)
    return summary


def _ordered_parts(dirs: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """``(directory, meta)`` of every part by index, after checking they make one whole corpus."""
    if not dirs:
        raise DataError("no parts given to merge")
    found: list[tuple[Path, dict[str, Any]]] = []
    for directory in dirs:
        meta = corpus_meta(directory)
        if meta is None:
            raise DataError("not a prepared corpus (no meta.json that says so), so not a part to merge",
                            path=directory)
        if PART not in meta:
            raise DataError("a whole prepared corpus, not a part of one (its meta.json has no 'part'; parts "
                            "come from muppets data prepare --part I/N)", path=directory)
        found.append((directory, meta))
    first_dir, first = found[0]
    mine = _signature(first)
    for directory, meta in found[1:]:
        theirs = _signature(meta)
        for what, value in mine.items():
            if theirs[what] != value:
                raise DataError(f"does not belong with {first_dir}: its {what} is {_short(theirs[what])}, "
                                f"{first_dir}'s is {_short(value)} (parts must be prepared from the same input "
                                "files with the same tokenizer and settings)", path=directory)
    count = int(first[PART]["count"])
    by_index: dict[int, Path] = {}
    for directory, meta in found:
        index = int(meta[PART]["index"])
        if index in by_index:
            raise DataError(f"part {index}/{count} is given twice: {by_index[index]} and {directory}",
                            path=directory)
        by_index[index] = directory
        want = part_range(index, count, int(meta[PART]["input_bytes"]))
        if meta[PART]["key_range"] != [want.lo, want.hi]:
            raise DataError(f"part {index}/{count} records the key range {meta[PART]['key_range']}, "
                            f"not {[want.lo, want.hi]}: not written by this version's --part", path=directory)
    missing = [i for i in range(1, count + 1) if i not in by_index]
    if missing:
        raise DataError(f"part{'s' if len(missing) > 1 else ''} {', '.join(f'{i}/{count}' for i in missing)} "
                        f"missing: a merge takes all {count} parts (given: "
                        f"{', '.join(f'{i}/{count}' for i in sorted(by_index))})")
    metas = dict(found)
    return [(by_index[i], metas[by_index[i]]) for i in range(1, count + 1)]


def _signature(meta: dict[str, Any]) -> dict[str, Any]:
    """What must be the same in every part of one corpus, by the words an error names it with."""
    part = meta[PART]
    units = meta.get("units")
    return {
        "number of parts": part.get("count"),
        "tokenizer fingerprint (tokenizer_sha256)": meta.get("tokenizer_sha256"),
        "vocab_size": meta.get("vocab_size"),
        "token dtype": meta.get("dtype"),
        "format_version": meta.get("format_version"),
        "masking units": None if units is None else {k: v for k, v in units.items() if k != "entity_lexicon"},
        "input format": meta.get("input_format"),
        "errors setting": part.get("errors"),
        "text_field": part.get("text_field"),
        "special-token strings read as text": meta.get("special_strings_as_text"),
        "input bytes": part.get("input_bytes"),
        "input files (name, size)": [(Path(f["path"]).name, f["size"]) for f in meta.get(SOURCE_FILES, [])],
    }


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _merged_meta(metas: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``meta.json`` gets besides the writer's own keys: part 1's, less ``part``, with
    the counts summed over the parts."""
    extra = {k: v for k, v in metas[0].items() if k not in _WRITER_KEYS and k != PART}
    skipped: dict[str, int] = {}
    for meta in metas:
        for name, count in meta.get("skipped", {}).items():
            skipped[name] = skipped.get(name, 0) + int(count)
    extra["skipped"] = skipped
    if "files" in extra:
        extra["files"] = sum(int(meta.get("files", 0)) for meta in metas)
    return extra


def _blocks(corpus: TokenCorpus, block_tokens: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                      np.ndarray | None]]:
    """The corpus' documents as ``add_encoded`` batches: tokens (T,), sentence lengths (S,),
    sentences per document (D,) and unit bits (T,) or None, about ``block_tokens`` tokens each."""
    doc_token_ends = corpus.document_token_ends  # (D,)
    doc, token, sentence = 0, 0, 0
    while doc < corpus.num_documents:
        stop = max(doc + 1, int(np.searchsorted(doc_token_ends, token + block_tokens, side="right")))
        sentence_stop = int(corpus.document_ends[stop - 1])
        token_stop = int(doc_token_ends[stop - 1])
        ends = np.asarray(corpus.document_ends[doc:stop], dtype=np.int64)
        counts = np.diff(ends, prepend=np.int64(sentence))  # (D,)
        sentence_ends = np.asarray(corpus.sentence_ends[sentence:sentence_stop], dtype=np.int64)
        lengths = np.diff(sentence_ends, prepend=np.int64(token))  # (S,)
        tokens = np.asarray(corpus.tokens[token:token_stop])
        flags = None if corpus.units is None else np.asarray(corpus.units[token:token_stop])
        yield tokens, lengths, counts, flags
        doc, sentence, token = stop, sentence_stop, token_stop
