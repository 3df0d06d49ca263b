"""Token streams read in place (:class:`FramedTokens`, :class:`DocumentStream`, chunked counts):
ids equal to the whole-array streams the objectives used to build (their code is kept here as the
reference), the GPT / ELMo / NNLM batches bit-identical to batches cut from those arrays, and the
heap memory of building the data (tracemalloc) not growing with the corpus."""

from __future__ import annotations

import doctest
import tracemalloc

import numpy as np
import pytest
import torch

from muppets.data import shards as shards_module
from muppets.data.shards import DocumentStream, FramedTokens, ShardWriter, TokenCorpus
from muppets.models.word2vec import Word2VecConfig, build_examples
from muppets.objectives.bilm import BiLMData, BiLMDataConfig
from muppets.objectives.clm import CausalLMData, CLMDataConfig
from muppets.objectives.nnlm import NNLMData, NNLMDataConfig, ngram_stream
from muppets.tokenizers.words import WordSettings, WordVocab
from muppets.train.distributed import micro_batch_ranges

BOS, EOS = 2, 3


def random_docs(seed: int, n_docs: int, vocab_size: int, sentences: int = 12) -> list[list[np.ndarray]]:
    """Documents of 1 to ``sentences`` sentences of 1-30 ids in [4, vocab_size), Zipf-like."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, vocab_size - 3)
    p = 1.0 / ranks / (1.0 / ranks).sum()
    return [[4 + rng.choice(len(ranks), size=int(rng.integers(1, 31)), p=p)
             for _ in range(int(rng.integers(1, sentences + 1)))] for _ in range(n_docs)]


def write(path, docs: list[list[np.ndarray]], vocab_size: int, copies: int = 1) -> TokenCorpus:
    with ShardWriter(path, vocab_size=vocab_size) as writer:
        for _ in range(copies):
            for doc in docs:
                writer.add_document(doc)
    return TokenCorpus(path)


@pytest.fixture(scope="module", params=[120, 70_000], ids=["uint16", "uint32"])
def corpus(request, tmp_path_factory):
    vocab_size = request.param
    return write(tmp_path_factory.mktemp("c") / "corpus", random_docs(0, 40, vocab_size), vocab_size)


# ----------------------------------------------------------------------------- the old arrays


def old_document_stream(corpus: TokenCorpus, docs: np.ndarray, eos_id: int) -> np.ndarray:
    parts = []
    for d in docs:
        parts.append(np.asarray(corpus.document_tokens(int(d)), dtype=np.int64))
        parts.append(np.array([eos_id], dtype=np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def old_bracketed_stream(corpus: TokenCorpus, bos_id: int, eos_id: int) -> tuple[np.ndarray, np.ndarray]:
    S, N = corpus.num_sentences, corpus.num_tokens
    ends = np.asarray(corpus.sentence_ends, dtype=np.int64)
    bos_at = ends - corpus.sentence_lengths + 2 * np.arange(S)
    eos_at = ends + 2 * np.arange(S) + 1
    stream = np.empty(N + 2 * S, np.int32)
    is_word = np.ones(N + 2 * S, bool)
    is_word[bos_at] = is_word[eos_at] = False
    stream[is_word] = corpus.tokens
    stream[bos_at], stream[eos_at] = bos_id, eos_id
    first, stop = corpus.doc_sentence_bounds.T
    return stream, np.stack([bos_at[first], eos_at[stop - 1] + 1], axis=1)


def old_ngram_stream(corpus, docs, context, bos_id, eos_id):
    streams, targets, offset = [], [], 0
    for d in docs.tolist():
        sentences = corpus.document_sentences(d)
        start = int(corpus.sentence_ends[sentences.start - 1]) if sentences.start > 0 else 0
        ends = np.asarray(corpus.sentence_ends[sentences.start:sentences.stop], dtype=np.int64) - start
        words = np.insert(np.asarray(corpus.document_tokens(d), dtype=np.int32), ends, eos_id)
        streams += [np.full(context, bos_id, dtype=np.int32), words]
        targets.append(offset + context + np.arange(len(words), dtype=np.int64))
        offset += context + len(words)
    if not streams:
        return np.zeros(0, np.int32), np.zeros(0, np.int64)
    return np.concatenate(streams), np.concatenate(targets)


def framed_by_hand(corpus: TokenCorpus, unit: str, bos, eos, d: int) -> list[int]:
    """Document ``d`` with each of its units framed, by hand."""
    units = ([corpus.sentence(i) for i in corpus.document_sentences(d)] if unit == "sentence"
             else [corpus.document_tokens(d)])
    out = []
    for tokens in units:
        out += ([bos] if bos is not None else []) + tokens.tolist() + ([eos] if eos is not None else [])
    return out


def same_batches(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(x.keys() == y.keys() and all(
        x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


# ----------------------------------------------------------------------------- the views


@pytest.mark.parametrize("unit", ["sentence", "document"])
@pytest.mark.parametrize("bos,eos", [(None, None), (None, EOS), (BOS, EOS), (BOS, None)])
@pytest.mark.parametrize("block", [3, FramedTokens.BLOCK])
def test_framed_tokens_equal_the_stream_by_hand(corpus, unit, bos, eos, block, monkeypatch):
    monkeypatch.setattr(FramedTokens, "BLOCK", block)  # units per index entry: many blocks, or few
    framed = FramedTokens(corpus, unit, bos=bos, eos=eos)
    expected = np.array([i for d in range(corpus.num_documents) for i in framed_by_hand(corpus, unit, bos, eos, d)])
    assert len(framed) == len(expected) and np.array_equal(framed[:], expected)
    assert framed[:].dtype == np.int64
    rng = np.random.default_rng(1)
    for _ in range(20):
        a = int(rng.integers(0, len(expected)))
        b = a + int(rng.integers(0, 50))
        assert np.array_equal(framed[a:b], expected[a:b])
    at = rng.integers(0, len(expected), size=(7, 5))
    assert np.array_equal(framed.ids(at), expected[at])
    assert framed[-1] == expected[-1] and framed[3] == expected[3]
    with pytest.raises(IndexError):
        framed[len(expected)]
    docs = np.array([0, 3, 4, 5, 17, 39])
    spans = framed.document_spans(docs)
    per_doc = [framed_by_hand(corpus, unit, bos, eos, d) for d in docs]
    assert [expected[s:e].tolist() for s, e in spans] == per_doc
    counts = framed.counts(docs, minlength=corpus.vocab_size)
    assert np.array_equal(counts, np.bincount(np.concatenate(per_doc), minlength=corpus.vocab_size))
    assert np.array_equal(framed.counts(), np.bincount(expected, minlength=corpus.vocab_size))


def test_document_stream_is_the_old_lm_stream(corpus):
    for docs in (np.arange(corpus.num_documents), np.array([5, 1, 2, 30]), np.array([], np.int64)):
        stream = DocumentStream(FramedTokens(corpus, "document", eos=EOS), docs)
        expected = old_document_stream(corpus, docs, EOS)
        assert len(stream) == len(expected) and np.array_equal(stream[:], expected)
        if len(expected):
            assert np.array_equal(stream.counts(corpus.vocab_size), np.bincount(expected, minlength=corpus.vocab_size))
            x = np.arange(len(expected))
            at, start = stream.locate(x)
            assert np.array_equal(stream.framed.ids(at), expected) and np.all(start <= at)


def test_counts_read_chunk_by_chunk(corpus):
    full = np.bincount(np.asarray(corpus.tokens), minlength=corpus.vocab_size)
    assert np.array_equal(corpus.count_tokens(chunk_tokens=7), full)
    assert np.array_equal(corpus.count_tokens(np.arange(corpus.num_documents), chunk_tokens=13), full)
    docs = np.array([2, 3, 9, 4])
    by_doc = sum(np.bincount(corpus.document_tokens(int(d)), minlength=corpus.vocab_size) for d in docs)
    assert np.array_equal(corpus.count_tokens(docs, chunk_tokens=5), by_doc)
    assert corpus.count_tokens(np.array([], np.int64), minlength=10**6).shape == (10**6,)


def test_shards_doctests():
    assert doctest.testmod(shards_module).failed == 0


# ----------------------------------------------------------------------------- the batches


def test_gpt_batches_are_those_of_the_old_array(corpus):
    data = CausalLMData(corpus, EOS, CLMDataConfig(block_size=9, eval_fraction=0.1, eval_blocks=7), 8, 2, 5)
    old = CausalLMData(corpus, EOS, CLMDataConfig(block_size=9, eval_fraction=0.1, eval_blocks=7), 8, 2, 5)
    old.stream = old_document_stream(corpus, np.setdiff1d(np.arange(corpus.num_documents), old.eval_docs), EOS)
    old.eval_stream = old_document_stream(corpus, old.eval_docs, EOS)
    assert len(data.stream) == len(old.stream) and data.epoch_size == old.epoch_size
    last = data.epoch_size // 8
    for step in (0, 1, last, last + 1, 3 * last + 2):
        for rank, world in ((0, 1), (1, 2)):
            assert same_batches(data.micro_batches(step, rank, world), old.micro_batches(step, rank, world))
    assert same_batches(data.eval_batches(4), old.eval_batches(4))


def word_corpus(corpus: TokenCorpus) -> WordVocab:
    """A word vocabulary whose ids are the corpus ids (specials 0..3), fingerprint matching."""
    specials = WordSettings().specials
    assert (specials.index("<s>"), specials.index("</s>")) == (BOS, EOS)
    words = specials + [f"w{i}" for i in range(4, corpus.vocab_size)]
    vocab = WordVocab(words, [0] * 4 + [1] * (len(words) - 4))
    corpus.meta["tokenizer_sha256"] = shards_module.tokenizer_fingerprint(vocab.to_json())
    return vocab


def test_elmo_batches_and_counts_are_those_of_the_old_array(corpus):
    vocab = word_corpus(corpus)
    cfg = BiLMDataConfig(window=7, eval_fraction=0.1, eval_windows=9)
    data = BiLMData(corpus, vocab, cfg, 6, 1, 3, softmax_size=60, max_chars=8)
    old = BiLMData(corpus, vocab, cfg, 6, 1, 3, softmax_size=60, max_chars=8)
    old.stream, bounds = old_bracketed_stream(corpus, vocab.bos_id, vocab.eos_id)
    assert np.array_equal(bounds[data.train_docs], data.train_bounds)
    last = data.epoch_size // 6
    for step in (0, 2, last, last + 1):
        for rank, world in ((0, 1), (1, 2)):
            assert same_batches(data.micro_batches(step, rank, world), old.micro_batches(step, rank, world))
    assert same_batches(data.eval_batches(4), old.eval_batches(4))
    counts = np.zeros(60, np.int64)  # the old token_counts
    for start, stop in old.train_bounds:
        ids = old.stream[start:stop].astype(np.int64)
        counts += np.bincount(np.where(ids < 60, ids, vocab.unk_id), minlength=60)
    assert np.array_equal(data.token_counts(), counts)


def test_nnlm_batches_and_counts_are_those_of_the_old_arrays(corpus):
    cfg = NNLMDataConfig(eval_fraction=0.1, eval_examples=50)
    data = NNLMData(corpus, 3, BOS, EOS, cfg, 16, 2, seed=4)
    assert sorted([*data.stream.docs, *data.eval_stream.docs]) == list(range(corpus.num_documents))
    stream, targets = old_ngram_stream(corpus, data.stream.docs, 3, BOS, EOS)
    eval_stream, eval_targets = old_ngram_stream(corpus, data.eval_stream.docs, 3, BOS, EOS)
    assert data.epoch_size == len(targets)

    def old_examples(stream, positions):
        window = positions[:, None] - 3 + np.arange(3)[None, :]
        return {"input_ids": torch.from_numpy(stream[window].astype(np.int64)),
                "labels": torch.from_numpy(stream[positions].astype(np.int64))}

    last = data.epoch_size // 16
    for step in (0, 1, last, last + 1):
        for rank, world in ((0, 1), (1, 2)):
            ranges = micro_batch_ranges(step, rank, world, 16, 2)
            expected = [old_examples(stream, targets[data.rows(r)]) for r in ranges]
            assert same_batches(data.micro_batches(step, rank, world), expected)
    picks = eval_targets[np.unique(np.linspace(0, len(eval_targets) - 1, 50).round().astype(np.int64))]
    expected = [old_examples(eval_stream, picks[i:i + 8]) for i in range(0, len(picks), 8)]
    assert same_batches(data.eval_batches(8), expected)
    assert np.array_equal(data.stream.counts(corpus.vocab_size), np.bincount(stream[targets], minlength=corpus.vocab_size))
    new_stream, new_targets = ngram_stream(corpus, data.stream.docs, 3, BOS, EOS)
    assert np.array_equal(new_stream, stream) and np.array_equal(new_targets, targets)
    assert new_stream.dtype == stream.dtype and new_targets.dtype == targets.dtype


# ----------------------------------------------------------------------------- memory


def heap_peak(build) -> int:
    """Peak bytes allocated on the heap (numpy included) while ``build()`` runs."""
    tracemalloc.start()
    try:
        build()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def one_and_two_copies(tmp_path_factory):
    """The same 100 documents once and twice (about 1.5M and 3M tokens: more than one chunk of
    :meth:`TokenCorpus.count_tokens`), 30,000 word ids."""
    rng, root = np.random.default_rng(1), tmp_path_factory.mktemp("mem")
    per_doc = rng.integers(500, 1500, size=100)  # (D,) sentences
    lengths = rng.integers(1, 31, size=int(per_doc.sum()))  # (S,) tokens
    tokens = 4 + np.minimum(rng.zipf(1.3, size=int(lengths.sum())) - 1, 30_000 - 5)  # (N,)
    out = []
    for copies in (1, 2):
        with ShardWriter(root / f"x{copies}", vocab_size=30_000) as writer:
            for _ in range(copies):
                writer.add_encoded(tokens, lengths, per_doc)
        out.append(TokenCorpus(root / f"x{copies}"))
    return out


def growth_per_token(corpora: list[TokenCorpus], build) -> float:
    """Extra peak heap bytes per extra corpus token from the 1-copy to the 2-copy corpus."""
    heap_peak(lambda: build(corpora[0]))  # warm up (imports, caches)
    one, two = (heap_peak(lambda c=c: build(c)) for c in corpora)
    return (two - one) / (corpora[1].num_tokens - corpora[0].num_tokens)


def test_gpt_data_memory_does_not_grow_with_the_corpus(one_and_two_copies):
    def build(corpus):
        data = CausalLMData(corpus, EOS, CLMDataConfig(block_size=64), 8, 1, 0)
        data.micro_batches(3, 0, 1), data.eval_batches(8), data.stream.counts(corpus.vocab_size)
    # only the epoch order grows: 8 bytes per block of 63 tokens (the old stream: 8 bytes per token, twice)
    assert growth_per_token(one_and_two_copies, build) < 0.2


def test_elmo_and_nnlm_data_memory_does_not_grow_with_the_corpus(one_and_two_copies):
    def elmo(corpus):
        data = BiLMData(corpus, word_corpus(corpus), BiLMDataConfig(), 8, 1, 0, softmax_size=1000, max_chars=8)
        data.micro_batches(0, 0, 1), data.eval_batches(8), data.token_counts()
    # only the epoch order grows: 8 bytes per window of ~31 tokens (the old stream, windows: 9+ per token)
    assert growth_per_token(one_and_two_copies, elmo) < 0.4

    def nnlm(corpus):
        data = NNLMData(corpus, 4, BOS, EOS, NNLMDataConfig(), 8, 1, 0)
        data.eval_batches(8), data.stream.counts(corpus.vocab_size)
    # no per-token array at all (a training batch then draws the epoch order: 8 bytes per word)
    assert growth_per_token(one_and_two_copies, nnlm) < 0.1


def test_word2vec_examples_memory_does_not_grow_with_the_corpus(one_and_two_copies):
    def build(corpus):
        examples = build_examples(corpus, Word2VecConfig(min_count=1, chunk_tokens=5_000))
        examples.chunk(0, 0)
    assert growth_per_token(one_and_two_copies, build) < 0.1  # the old count: an int64 copy, 8 per token
