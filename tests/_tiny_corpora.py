"""Tiny prepared corpora (shared by the objective, StepData and ELMo tests)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from muppets.data.prepare import prepare_corpus
from muppets.data.shards import ShardWriter, TokenCorpus
from muppets.tokenizers.words import WordVocab
from test_pretrain_e2e import write_corpus


def random_corpus(out: Path, documents: int, max_sentences: int, vocab_size: int = 500) -> TokenCorpus:
    """``documents`` documents of 3 .. ``max_sentences`` sentences of 3..25 random ids in
    ``[5, vocab_size)`` (ids 0-4 are left to the special tokens), drawn from seed 0."""
    rng = np.random.default_rng(0)
    with ShardWriter(out, vocab_size=vocab_size) as w:
        for _ in range(documents):
            w.add_document([rng.integers(5, vocab_size, size=rng.integers(3, 26)).tolist()
                            for _ in range(rng.integers(3, max_sentences + 1))])
        w.finish()
    return TokenCorpus(out)


def book_corpus(out: Path, sentences: list[int], vocab_size: int = 500, seed: int = 0) -> TokenCorpus:
    """Long documents ("books") of the given numbers of sentences of 3..25 random ids in
    ``[5, vocab_size)``, drawn from ``seed``: a small corpus of one's own, few documents long."""
    rng = np.random.default_rng(seed)
    with ShardWriter(out, vocab_size=vocab_size) as w:
        for n in sentences:
            lengths = rng.integers(3, 26, size=n)
            ids = rng.integers(5, vocab_size, size=int(lengths.sum()))
            w.add_encoded(ids, lengths, np.array([n]))
        w.finish()
    return TokenCorpus(out)


def word_corpus(root: Path) -> tuple[WordVocab, TokenCorpus]:
    """The generated 46-document corpus (:func:`test_pretrain_e2e.write_corpus`, in ``root/raw``)
    as word ids of a cased vocabulary of every word, prepared into ``root/corpus``."""
    raw = write_corpus(root / "raw")
    texts = [line for line in (raw / "docs.txt").read_text().splitlines() if line.strip()]
    texts += [json.loads(line)["text"] for line in (raw / "extra.jsonl").read_text().splitlines()]
    vocab = WordVocab.build(texts, min_count=1, max_size=0, lowercase=False)
    prepare_corpus([raw], vocab, root / "corpus", workers=1, progress=False)
    return vocab, TokenCorpus(root / "corpus")
