"""word2vec: tiny runs (skip-gram, CBOW, threads), hand-computed references (the negative-sampling
update vs autograd, the subsampling formula, the noise distribution, windows and pairs), parity
with gensim (vector files both ways, byte-identical writers, GloVe, WordSim/SimLex/analogy scores
equal to gensim's own evaluation), invariance (same seed, resume == uninterrupted, save/load)
and a quality smoke test on a corpus with two clear topics."""

from __future__ import annotations

import doctest
import json
import math
import shutil

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from muppets import vectors as vectors_module
from muppets.data.shards import ShardWriter, TokenCorpus
from muppets.errors import CheckpointError, ConfigError, DataError, RunDirError
from muppets.evaluation.word_vectors import (GOOGLE_ANALOGIES, SIMLEX999, WORDSIM353, evaluate_analogies,
                                             evaluate_word_pairs, gensim_test_file)
from muppets.interop.word2vec_format import read_vectors, sniff_format, write_word2vec_format
from muppets.models import word2vec_native
from muppets.models.word2vec import (Word2VecConfig, Word2VecModel, _ChunkTrainer, _Kernel, build_examples,
                                     cbow_step, sgns_step, sgns_steps, train_word2vec)
from muppets.objectives.word2vec import (NoiseSampler, TrainingVocab, Word2VecExamples, context_positions,
                                         keep_probabilities, lanes, plan_chunks, reduced_windows, skipgram_pairs)
from muppets.recipes.word2vec_train import Word2VecRunConfig
from muppets.recipes.word2vec_train import run as run_word2vec
from muppets.tokenizers.words import WordVocab
from muppets.vectors import WordVectors

gensim = pytest.importorskip("gensim")
from gensim.models import KeyedVectors  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def make_corpus(path, docs: list[list[list[str]]]) -> tuple[TokenCorpus, WordVocab]:
    """A prepared corpus of ``docs`` (documents of sentences of words), every word in the vocabulary."""
    vocab = WordVocab.build([" ".join(s) for d in docs for s in d], min_count=1)
    with ShardWriter(path, vocab_size=vocab.vocab_size) as writer:
        for doc in docs:
            writer.add_document([vocab.encode_words(s) for s in doc])
    return TokenCorpus(path), vocab


def topic_docs(seed: int = 0, sentences: int = 400) -> list[list[list[str]]]:
    """Sentences drawn from one of two disjoint topics (plus a shared frequent word)."""
    rng = np.random.default_rng(seed)
    topics = [[f"a{i}" for i in range(8)], [f"b{i}" for i in range(8)]]
    docs = []
    for d in range(sentences // 20):
        doc = []
        for _ in range(20):
            words = list(rng.choice(topics[rng.integers(2)], size=7)) + ["the"]
            rng.shuffle(words)
            doc.append([str(w) for w in words])
        docs.append(doc)
    return docs


def tiny_config(**kw) -> Word2VecConfig:
    base = dict(vector_size=16, window=3, negative=4, sample=0.0, min_count=1, epochs=2, batch_size=32,
                updates_per_call=2, chunk_tokens=400, backend="eager", seed=3, log_every_s=1e9)
    return Word2VecConfig(**{**base, **kw})


# ============================================================================ tier 1: tiny runs


def test_the_training_curves_count_chunks_not_steps(tmp_path, monkeypatch):
    """word2vec logs one loss per chunk: its picture's x axis says so."""
    from muppets.train import plots

    labels, render = [], plots.render

    def recording(*args, **kwargs):
        figure = render(*args, **kwargs)
        labels.append({ax.get_xlabel() for ax in figure.axes})
        return figure

    monkeypatch.setattr(plots, "render", recording)
    corpus, vocab = make_corpus(tmp_path / "c", topic_docs(sentences=40))
    train_word2vec(corpus, vocab.words, tiny_config(epochs=1), run_dir=tmp_path / "run")
    assert labels == [{"chunk"}] and (tmp_path / "run" / plots.PLOT_FILE).is_file()


@pytest.mark.parametrize("sg", [True, False])
def test_tiny_training_runs(tmp_path, sg):
    corpus, vocab = make_corpus(tmp_path / "c", topic_docs(sentences=100))
    model, result = train_word2vec(corpus, vocab.words, tiny_config(sg=sg, sample=1e-3), run_dir=tmp_path / "run")
    assert model.input_vectors.shape == (17, 16) and torch.isfinite(model.input_vectors).all()
    assert result.raw_words == 2 * corpus.num_tokens and 0 < result.effective_words < result.raw_words
    assert result.epochs_done == 2 and not result.stopped_early and math.isfinite(result.mean_loss)
    assert model.words[0] == "the" and (tmp_path / "run" / "vectors.bin").is_file()
    assert (tmp_path / "run" / "training_curves.png").read_bytes()[:4] == b"\x89PNG"  # the loss per chunk
    encoded = model(torch.tensor([[0, 1, -1]]))
    assert encoded.layers[0].shape == (1, 3, 16) and encoded.mask.tolist() == [[True, True, False]]
    assert torch.equal(encoded.layers[0][0, 2], torch.zeros(16))


def test_worker_processes_train_the_same_examples(tmp_path):
    corpus, vocab = make_corpus(tmp_path / "c", topic_docs(sentences=100))
    _, one = train_word2vec(corpus, vocab.words, tiny_config(sample=1e-3))
    model, two = train_word2vec(corpus, vocab.words, tiny_config(sample=1e-3, workers=2))
    assert (one.effective_words, one.examples) == (two.effective_words, two.examples)  # chunks are pure
    assert torch.isfinite(model.input_vectors).all()


def test_worker_processes_get_the_vocabulary_in_shared_memory(tmp_path, monkeypatch):
    """The corpus is counted once, in the parent: a worker maps the corpus and reads the
    training vocabulary from shared memory (one copy for every worker), it never recounts."""
    corpus, _ = make_corpus(tmp_path / "c", topic_docs(sentences=100))
    cfg = tiny_config(sample=1e-3)
    examples = build_examples(corpus, cfg)
    assert np.array_equal(examples.vocab.counts[np.argsort(examples.vocab.corpus_ids)],
                          np.bincount(np.asarray(corpus.tokens))[np.sort(examples.vocab.corpus_ids)])
    w = torch.zeros(len(examples.vocab), cfg.vector_size)
    trainer = _ChunkTrainer(cfg, examples, w, w)
    state = trainer.__getstate__()
    assert all(t.is_shared() for t in state["vocab"]) and trainer.__getstate__()["vocab"] is state["vocab"]
    monkeypatch.setattr(TokenCorpus, "count_tokens", lambda *a, **k: pytest.fail("a worker counted the corpus"))
    worker = _ChunkTrainer.__new__(_ChunkTrainer)
    worker.__setstate__(state)
    for name in ("corpus_ids", "counts", "remap"):
        assert np.array_equal(getattr(worker.examples.vocab, name), getattr(examples.vocab, name))
    a, b = worker.examples.chunk(1, 1), examples.chunk(1, 1)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert np.array_equal(worker.examples.token_bounds, examples.token_bounds)
    assert examples.token_bounds[0] == 0 and examples.token_bounds[-1] == corpus.num_tokens


def test_recipe_end_to_end(tmp_path):
    text = tmp_path / "text"
    text.mkdir()
    for i, doc in enumerate(topic_docs(sentences=200)):
        (text / f"d{i}.txt").write_text(" ".join(" ".join(s).capitalize() + "." for s in doc) + "\n")
    cfg = Word2VecRunConfig(run_dir=str(tmp_path / "run"), word2vec=tiny_config())
    cfg.corpus.inputs, cfg.corpus.workers = [str(text)], 1
    summary = run_word2vec(cfg)
    assert summary["words"] == 18 and summary["epochs_done"] == 2  # 16 topic words, "the" and "."
    assert math.isnan(summary["scores"]["wordsim353_spearman"]) and summary["scores"]["analogy_questions"] == 0
    wv = WordVectors.load(tmp_path / "run" / "vectors.bin")
    assert np.array_equal(wv.vectors, Word2VecModel.load(tmp_path / "run" / "model").input_vectors.numpy())
    again = run_word2vec(cfg)  # everything exists: vocab and corpus are reused, training is done
    assert again["effective_words"] == summary["effective_words"]


def test_config_checks_and_presets():
    with pytest.raises(ConfigError, match="window"):
        Word2VecConfig(window=0)
    with pytest.raises(ConfigError, match="backend"):
        Word2VecConfig(backend="gpu")
    assert Word2VecConfig.preset("word2vec-c-cbow").alpha == 0.05
    assert not Word2VecConfig.preset("gensim-cbow").sg
    with pytest.raises(ConfigError, match="unknown word2vec preset"):
        Word2VecConfig.preset("nope")


# ============================================================================ tier 2: by hand


def test_sgns_step_is_sgd_on_the_negative_sampling_loss():
    """The batched update equals -alpha * autograd's gradient of -L (two words, one a duplicate)."""
    torch.manual_seed(0)
    w_in, w_out = torch.randn(2, 3), torch.randn(2, 3)
    inputs = torch.tensor([0, 1, 0])
    targets = torch.tensor([[1, 0], [0, 1], [1, 1]])  # positive, then one noise word
    weights = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])  # noise == positive: skipped
    a_in, a_out = w_in.clone().requires_grad_(), w_out.clone().requires_grad_()
    scores = (a_out[targets] * a_in[inputs].unsqueeze(1)).sum(-1)
    signs = torch.tensor([1.0, -1.0])
    loss = -(torch.nn.functional.logsigmoid(scores * signs) * weights).sum()
    loss.backward()
    new_in, new_out = w_in.clone(), w_out.clone()
    returned = sgns_step(new_in, new_out, inputs, targets, weights, torch.tensor(0.1))
    assert torch.allclose(returned, loss.detach())
    assert torch.allclose(new_in, w_in - 0.1 * a_in.grad, atol=1e-6)
    assert torch.allclose(new_out, w_out - 0.1 * a_out.grad, atol=1e-6)


def test_cbow_step_updates_every_context_with_the_full_error():
    """CBOW: output vectors get -alpha * gradient; each context vector gets the gradient with
    respect to the MEAN (not divided by the context count), as word2vec.c and gensim do."""
    torch.manual_seed(1)
    w_in, w_out = torch.randn(4, 3), torch.randn(4, 3)
    inputs, mask = torch.tensor([[1, 2, 0]]), torch.tensor([[1.0, 1.0, 0.0]])
    targets, weights = torch.tensor([[3, 0]]), torch.ones(1, 2)
    h = w_in[[1, 2]].mean(0).requires_grad_()
    a_out = w_out.clone().requires_grad_()
    scores = (a_out[targets[0]] * h).sum(-1)
    loss = -(torch.nn.functional.logsigmoid(scores * torch.tensor([1.0, -1.0]))).sum()
    loss.backward()
    new_in, new_out = w_in.clone(), w_out.clone()
    cbow_step(new_in, new_out, inputs, mask, targets, weights, torch.tensor(0.5))
    assert torch.allclose(new_out, w_out - 0.5 * a_out.grad, atol=1e-6)
    for row in (1, 2):
        assert torch.allclose(new_in[row], w_in[row] - 0.5 * h.grad, atol=1e-6)
    assert torch.equal(new_in[[0, 3]], w_in[[0, 3]])


def test_compiled_kernel_matches_eager():
    """Two fused updates (the second reads what the first wrote) compiled == eager."""
    torch.manual_seed(2)
    w_in, w_out = torch.randn(50, 8), torch.randn(50, 8)
    inputs, targets = torch.randint(0, 50, (2, 16)), torch.randint(0, 50, (2, 16, 4))
    weights, alphas = torch.ones(2, 16, 4), torch.tensor([0.05, 0.04])
    kernel = _Kernel(sgns_steps, "auto")
    if kernel.warm_up(w_in.clone(), w_out.clone(), inputs, targets, weights * 0, alphas) != "compiled":
        pytest.skip("torch.compile is not available here")
    a_in, a_out, b_in, b_out = w_in.clone(), w_out.clone(), w_in.clone(), w_out.clone()
    loss_c = kernel.call(a_in, a_out, inputs, targets, weights, alphas)
    loss_e = sgns_steps(b_in, b_out, inputs, targets, weights, alphas)
    assert torch.allclose(loss_c, loss_e, rtol=1e-5)
    assert torch.allclose(a_in, b_in, atol=1e-6) and torch.allclose(a_out, b_out, atol=1e-6)


def test_native_kernel_matches_eager():
    """A chunk of batches through the C loop == the same batches through sgns_step, one by one:
    duplicates within a batch add up, every update reads the values before its batch, padding
    (weight 0) changes nothing, and the loss is the same sum."""
    lib = word2vec_native.load()
    if lib is None:
        pytest.skip("no C compiler here")
    torch.manual_seed(4)
    V, d, N, B, K = 40, 13, 5, 24, 3  # d not a multiple of the vector width; V small: duplicates
    w_in, w_out = torch.randn(V, d) * 0.3, torch.randn(V, d) * 0.3
    inputs, targets = torch.randint(0, V, (N, B)), torch.randint(0, V, (N, B, 1 + K))
    weights = (targets != targets[..., :1]).float()
    weights[..., 0] = 1.0
    weights[-1, -5:] = 0.0  # padding
    alphas = torch.linspace(0.5, 0.2, N)
    a_in, a_out, b_in, b_out = w_in.clone(), w_out.clone(), w_in.clone(), w_out.clone()
    loss_n = word2vec_native.sgns_chunk(lib, a_in, a_out, inputs, targets, weights, alphas,
                                        word2vec_native.scratch_for(B, d, 1 + K))
    loss_e = sum(float(sgns_step(b_in, b_out, inputs[j], targets[j], weights[j], alphas[j])) for j in range(N))
    assert loss_n == pytest.approx(loss_e, rel=1e-5)
    assert torch.allclose(a_in, b_in, atol=1e-5) and torch.allclose(a_out, b_out, atol=1e-5)
    assert not torch.equal(a_in, w_in)
    with pytest.raises(IndexError):
        word2vec_native.sgns_chunk(lib, a_in, a_out, inputs + V, targets, weights, alphas,
                                   word2vec_native.scratch_for(B, d, 1 + K))
    with pytest.raises(ConfigError, match="backend"):
        Word2VecConfig(sg=False, backend="native")


_MASK64 = 2**64 - 1


class _Xorshift:
    """The native window loop's noise generator (xorshift64*, Walker's alias draw), in Python."""

    def __init__(self, seed: int, threshold: np.ndarray, alias: np.ndarray) -> None:
        self.state, self.threshold, self.alias = (seed % 2**64) | 1, threshold, alias

    def draw(self) -> int:
        x = self.state
        x ^= x >> 12
        x ^= (x << 25) & _MASK64
        x ^= x >> 27
        self.state = x
        r = (x * 0x2545F4914F6CDD1D) & _MASK64
        bucket = ((r >> 32) * len(self.alias)) >> 32
        coin = np.float32(r & 0xFFFFFF) * np.float32(1.0 / 16777216.0)
        return int(bucket) if coin < self.threshold[bucket] else int(self.alias[bucket])


def _window_reference(w_in, w_out, ids, sentence, windows, alphas, K, shared, gen):
    """update=window(-shared) by hand, one centre at a time: each context's targets are the centre
    and K noise words (its own, or the window's), drawn window by window in the loop's order;
    G = α (y - σ(scores)) w (w = 0 for a noise word equal to the centre) from the rows before the
    window, then every target row += g v and every context row += Σ g u, duplicates adding up."""
    loss, pairs = 0.0, 0
    n = len(ids)
    for i in range(n):
        b = int(windows[i])
        ctx = [int(ids[j]) for j in range(i - b, i + b + 1) if 0 <= j < n and j != i and sentence[j] == sentence[i]]
        if not ctx:
            continue
        drawn = [gen.draw() for _ in range(K if shared else K * len(ctx))]
        c = int(ids[i])
        V_old, dv = w_in[ctx].clone(), torch.zeros(len(ctx), w_in.shape[1])
        out_rows, out_updates = [], []
        for j, v in enumerate(V_old):
            noise = drawn[:K] if shared else drawn[j * K:(j + 1) * K]
            targets = [c] + noise
            w = torch.tensor([1.0] + [0.0 if t == c else 1.0 for t in noise])
            U = w_out[targets]  # (1 + K, d): the rows before the window (w_out is updated below)
            scores = U @ v
            y = torch.zeros_like(scores)
            y[0] = 1.0
            g = (y - torch.sigmoid(scores)) * w * alphas[i]
            loss += float(-(F.logsigmoid(scores * (2 * y - 1)) * w).sum())
            dv[j] = g @ U
            out_rows += [t for t, wt in zip(targets, w) if wt > 0]
            out_updates += [g[t] * v for t in range(1 + K) if w[t] > 0]
        w_out.index_add_(0, torch.tensor(out_rows), torch.stack(out_updates))
        w_in.index_add_(0, torch.tensor(ctx), dv)
        pairs += len(ctx)
    return loss, pairs


@pytest.mark.parametrize("shared", [False, True])
def test_native_window_loop_matches_the_hand_reference(shared):
    """update=window and window-shared: every centre's window is one update (hand reference
    above, with the loop's own noise generator); windows stop at sentence ends, a noise word equal
    to the centre is not updated, repeated words add up, and the pair count is skipgram_pairs'."""
    lib = word2vec_native.load()
    if lib is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(5)
    V, d, n, K, W = 12, 13, 160, 4, 3  # d not a multiple of the vector width; V small: repeats, noise = centre
    w_in, w_out = torch.randn(V, d) * 0.3, torch.randn(V, d) * 0.3
    ids = rng.integers(0, V, n)
    sentence = np.repeat(np.arange(20), 8)
    windows = reduced_windows(n, W, rng)
    alphas = torch.linspace(0.5, 0.1, n)
    noise = NoiseSampler(rng.integers(1, 50, V))
    tables = noise.threshold.astype(np.float32), noise.alias.astype(np.int32)
    as32 = [torch.from_numpy(a.astype(np.int32)) for a in (ids, sentence, windows)]
    a_in, a_out, b_in, b_out = w_in.clone(), w_out.clone(), w_in.clone(), w_out.clone()
    loss_n, pairs_n = word2vec_native.sgns_windows(lib, a_in, a_out, *as32, alphas, K, shared, *tables, 77,
                                                   word2vec_native.window_scratch(d))
    loss_r, pairs_r = _window_reference(b_in, b_out, ids, sentence, windows, alphas, K, shared,
                                        _Xorshift(77, *tables))
    assert pairs_n == pairs_r == len(skipgram_pairs(ids, sentence, windows, W)[0])
    assert loss_n == pytest.approx(loss_r, rel=1e-5)
    assert torch.allclose(a_in, b_in, atol=1e-5) and torch.allclose(a_out, b_out, atol=1e-5)
    with pytest.raises(IndexError):
        word2vec_native.sgns_windows(lib, a_in, a_out, as32[0] + V, *as32[1:], alphas, K, shared, *tables, 77,
                                     word2vec_native.window_scratch(d))


def test_the_window_loops_noise_draws_follow_the_noise_distribution():
    """The loop's generator (mirrored above, exactly, by the reference test) draws P_n."""
    counts = np.array([1000, 300, 100, 30, 10, 3, 1])
    noise = NoiseSampler(counts)
    gen = _Xorshift(3, noise.threshold.astype(np.float32), noise.alias.astype(np.int32))
    drawn = np.bincount([gen.draw() for _ in range(60_000)], minlength=len(counts)) / 60_000
    assert np.abs(drawn - noise.probabilities).max() < 0.01


def test_window_updates_are_checked():
    with pytest.raises(ConfigError, match="update"):
        Word2VecConfig(sg=False, update="window")
    with pytest.raises(ConfigError, match="update"):
        Word2VecConfig(update="window-shared", backend="eager")
    with pytest.raises(ConfigError, match="update"):
        Word2VecConfig(update="windows")
    with pytest.raises(ConfigError, match="update"):
        Word2VecConfig(update="window", window=65)


def test_window_updates_without_a_compiler_say_so(tmp_path, monkeypatch):
    """No C compiler: update=window stops with one error that names the way out."""
    monkeypatch.setattr(word2vec_native, "load", lambda: None)
    corpus, vocab = make_corpus(tmp_path / "c", topic_docs(sentences=40))
    with pytest.raises(ConfigError, match="update=pair"):
        train_word2vec(corpus, vocab.words, tiny_config(backend="auto", update="window-shared"))


@pytest.mark.parametrize("update", ["window", "window-shared"])
def test_window_updates_learn_the_topics_and_repeat_themselves(tmp_path, update):
    """update=window(-shared) end to end: the same seed gives the same vectors, and the topics are learned."""
    if word2vec_native.load() is None:
        pytest.skip("no C compiler here")
    corpus, vocab = make_corpus(tmp_path / "c", topic_docs(sentences=600))
    cfg = tiny_config(epochs=5, backend="auto", update=update)
    model, result = train_word2vec(corpus, vocab.words, cfg)
    again, _ = train_word2vec(corpus, vocab.words, cfg)
    assert result.backend == "native" and result.examples > result.effective_words
    assert torch.equal(model.input_vectors, again.input_vectors)
    wv = model.word_vectors()
    same = np.mean([wv.similarity(f"a{i}", f"a{j}") for i in range(8) for j in range(i)])
    cross = np.mean([wv.similarity(f"a{i}", f"b{j}") for i in range(8) for j in range(8)])
    assert same > cross + 0.3
    assert all(w.startswith("b") for w, _ in wv.most_similar("b0", topn=5))


def test_keep_probability_formula():
    counts = np.array([1000, 10, 1])
    t = 1e-3 * 1011
    expected = [(math.sqrt(f / t) + 1) * t / f for f in (1000, 10)] + [1.0]  # count 1: kept (p > 1)
    assert np.allclose(keep_probabilities(counts, 1e-3), expected)
    assert np.allclose(keep_probabilities(counts, 0.0), 1.0)
    rng = np.random.default_rng(0)  # the subsampling draw keeps that share of a frequent word
    assert abs((rng.random(200_000) < expected[0]).mean() - expected[0]) < 0.005


def test_noise_distribution_is_count_to_the_three_quarters():
    counts = np.array([900, 100, 50, 7, 1])
    sampler = NoiseSampler(counts, exponent=0.75)
    target = counts ** 0.75 / (counts ** 0.75).sum()
    assert np.allclose(sampler.mass(), target, atol=1e-7)  # the alias tables are exact
    draws = sampler.sample(np.random.default_rng(0), (400_000,))
    assert np.allclose(np.bincount(draws, minlength=5) / len(draws), target, atol=3e-3)


def test_windows_pairs_and_chunks():
    rng = np.random.default_rng(0)
    windows = reduced_windows(10_000, 5, rng)
    assert windows.min() == 1 and windows.max() == 5 and abs(windows.mean() - 3) < 0.05
    ids = np.array([10, 11, 12, 20, 21])
    sentence = np.array([0, 0, 0, 1, 1])  # two sentences: windows never cross them
    inputs, outputs = skipgram_pairs(ids, sentence, np.array([1, 2, 1, 2, 2]), window=2)
    pairs = sorted(zip(outputs.tolist(), inputs.tolist()))  # (centre, context)
    assert pairs == [(10, 11), (11, 10), (11, 12), (12, 11), (20, 21), (21, 20)]
    _, valid = context_positions(sentence, np.array([2, 2, 2, 2, 2]), window=2)
    assert valid.sum() == 6 + 2
    assert plan_chunks(np.array([3, 5, 9, 10, 14]), 5).tolist() == [0, 2, 4, 5]


def test_lanes_put_consecutive_examples_in_consecutive_batches():
    # 8 examples, batches of 2: lane 0 = examples 0-3, lane 1 = examples 4-7
    assert lanes(np.arange(8), 2).tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
    pairs = np.arange(12).reshape(6, 2)  # trailing axes travel with their example
    assert lanes(pairs, 3)[1].tolist() == [[2, 3], [6, 7], [10, 11]]


def test_a_batch_never_holds_neighbouring_examples(tmp_path):
    corpus, _ = make_corpus(tmp_path / "c", topic_docs(sentences=60))
    vocab = TrainingVocab.from_corpus(corpus, min_count=1)
    ex = Word2VecExamples(corpus, vocab, sg=True, window=3, negative=2, sample=0.0, ns_exponent=0.75,
                          batch_size=4, chunk_tokens=10_000, seed=0)
    batches = ex.chunk(0, 0)
    rng = np.random.default_rng([0, 0, 0])  # the chunk's own draws, replayed
    ids, sentence = ex._kept_words(0, rng)
    inputs, outputs = skipgram_pairs(ids, sentence, reduced_windows(len(ids), 3, rng), 3)
    N = batches.num_batches
    assert batches.examples == len(inputs)
    got = batches.inputs.T.reshape(-1)[:len(inputs)]  # lane after lane = corpus order again
    assert got.tolist() == inputs.tolist()
    assert batches.targets[..., 0].T.reshape(-1)[:len(outputs)].tolist() == outputs.tolist()
    assert N * 4 >= len(inputs) > (N - 1) * 4  # less than one batch of padding


def test_examples_are_a_pure_function_of_seed_epoch_chunk(tmp_path):
    corpus, _ = make_corpus(tmp_path / "c", topic_docs(sentences=60))
    vocab = TrainingVocab.from_corpus(corpus, min_count=1)
    ex = Word2VecExamples(corpus, vocab, sg=True, window=3, negative=2, sample=1e-2, ns_exponent=0.75,
                          batch_size=16, chunk_tokens=100, seed=0)
    a, b, c = ex.chunk(1, 2), ex.chunk(1, 2), ex.chunk(0, 2)
    assert torch.equal(a.targets, b.targets) and not torch.equal(a.targets, c.targets)
    assert sum(ex.chunk(0, k).raw_words for k in range(ex.num_chunks)) == corpus.num_tokens
    assert (a.weights[..., 1:] == 0).sum() == ((a.targets[..., 1:] == a.targets[..., :1]) | (a.weights[..., :1] == 0)).sum()


# ============================================================================ tier 3: gensim parity


def sample_vectors(n: int = 30, d: int = 5, seed: int = 0) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    words = ["the", "ölçü", "naïve", "x-ray", "don't"] + [f"w{i}" for i in range(n - 5)]
    return words, rng.normal(size=(n, d)).astype(np.float32)


def gensim_kv(words, matrix) -> KeyedVectors:
    kv = KeyedVectors(matrix.shape[1])
    kv.add_vectors(words, matrix)
    return kv


@pytest.mark.parametrize("binary", [False, True])
def test_our_files_load_in_gensim_and_are_byte_identical(tmp_path, binary):
    words, matrix = sample_vectors()
    ours = write_word2vec_format(tmp_path / "ours", words, matrix, binary=binary)
    gensim_kv(words, matrix).save_word2vec_format(str(tmp_path / "theirs"), binary=binary)
    assert ours.read_bytes() == (tmp_path / "theirs").read_bytes()
    kv = KeyedVectors.load_word2vec_format(str(ours), binary=binary)
    assert kv.index_to_key == words and np.array_equal(kv.vectors, matrix)
    wv = WordVectors(words, matrix)
    for query in (["the"], ["w3", "w4"]):
        theirs = kv.most_similar(positive=query, negative=["w1"], topn=5)
        mine = wv.most_similar(positive=query, negative=["w1"], topn=5)
        assert [w for w, _ in mine] == [w for w, _ in theirs]
        assert np.allclose([s for _, s in mine], [s for _, s in theirs], atol=1e-6)
    assert wv.similarity("the", "w2") == pytest.approx(float(kv.similarity("the", "w2")), abs=1e-6)


@pytest.mark.parametrize("binary", [False, True])
def test_we_read_gensim_files(tmp_path, binary):
    words, matrix = sample_vectors(seed=1)
    gensim_kv(words, matrix).save_word2vec_format(str(tmp_path / "v"), binary=binary)
    assert sniff_format(tmp_path / "v") == ("word2vec-binary" if binary else "word2vec-text")
    wv = WordVectors.load(tmp_path / "v")
    assert wv.words == words and np.array_equal(wv.vectors, matrix)
    assert WordVectors.load(tmp_path / "v", limit=3).words == words[:3]


def test_c_tool_binary_with_newlines_and_glove(tmp_path):
    words, matrix = sample_vectors(n=6, seed=2)
    body = b"".join(w.encode() + b" " + row.astype("<f4").tobytes() + b"\n" for w, row in zip(words, matrix))
    (tmp_path / "c.bin").write_bytes(b"6 5\n" + body)
    wv = WordVectors.load(tmp_path / "c.bin", fmt="word2vec-binary")
    assert wv.words == words and np.array_equal(wv.vectors, matrix)
    glove = gensim_test_file("test_glove.txt")
    ours = WordVectors.load(glove)  # sniffed: no header line
    kv = KeyedVectors.load_word2vec_format(str(glove), no_header=True)
    assert ours.words == kv.index_to_key and np.array_equal(ours.vectors, kv.vectors)


def test_format_errors_name_file_and_line(tmp_path):
    (tmp_path / "short.txt").write_text("2 3\nthe 1 2 3\ncat 1 2\n")
    with pytest.raises(DataError, match=r"short.txt:3: expected 3 values after the word, found 2"):
        read_vectors(tmp_path / "short.txt")
    (tmp_path / "nan.txt").write_text("1 2\nthe 1 x\n")
    with pytest.raises(DataError, match=r"nan.txt:2: not a number \(value: 'x'\)"):
        read_vectors(tmp_path / "nan.txt", fmt="word2vec-text")
    (tmp_path / "cut.bin").write_bytes(b"2 2\nab " + np.ones(2, "<f4").tobytes() + b"cd " + b"\x00")
    with pytest.raises(DataError, match=r"cut.bin \(byte 15\): file ends inside vector 2 of 2"):
        read_vectors(tmp_path / "cut.bin", fmt="word2vec-binary")
    with pytest.raises(DataError, match="header"):
        read_vectors(gensim_test_file("test_glove.txt"), fmt="word2vec-text")
    with pytest.raises(DataError, match="whitespace"):
        write_word2vec_format(tmp_path / "bad", ["a b"], np.zeros((1, 2)))
    with pytest.raises(KeyError, match="'zzz' is not among"):
        WordVectors(["a"], np.ones((1, 2)))["zzz"]


def test_an_unknown_word_is_one_line_naming_the_nearest_spellings(tmp_path, capsys):
    from muppets.cli import main as cli_main
    from muppets.errors import UnknownWordError

    words = ["king", "queen", "kings", "kingdom", "man", "woman", "paris"]
    wv = WordVectors(words, np.random.default_rng(0).normal(size=(len(words), 4)).astype(np.float32))
    with pytest.raises(UnknownWordError) as err:
        wv.most_similar("King")
    text = str(err.value)
    assert isinstance(err.value, KeyError) and err.value.word == "King" and "\n" not in text
    assert text.startswith("'King' is not among the 7 words") and "they are lower-cased: try 'king'" in text
    assert wv.suggestions("kingz") == ["king", "kings", "kingdom"]  # difflib ratios 0.89, 0.80, 0.67
    assert "no word spelt like it" in str(pytest.raises(KeyError, wv.__getitem__, "xyzzy").value)
    cased = WordVectors(["Paris", "king", "parish"], np.eye(3, dtype=np.float32))  # not lower-cased: no hint
    text = str(pytest.raises(UnknownWordError, cased.unit, "paris").value)
    assert "lower-cased" not in text and text.endswith("(nearest spellings: 'Paris', 'parish')")
    path = wv.save(tmp_path / "v.bin")
    assert cli_main(["vectors", "similar", "King", "--vectors", str(path)]) == 2
    err_text = capsys.readouterr().err.strip()
    assert err_text.startswith("muppets: error: 'King' is not among the 7 words") and "\n" not in err_text
    assert "try 'king'" in err_text and "Traceback" not in err_text


def evaluation_vectors(seed: int = 0) -> tuple[list[str], np.ndarray]:
    """Vectors for the test-set words with some analogy structure, a few words missing (OOV) and
    case variants after their lower-case forms (case-insensitive lookups take the first)."""
    rng = np.random.default_rng(seed)
    vec: dict[str, np.ndarray] = {}
    relation: dict[str, np.ndarray] = {}
    section = ""
    for line in gensim_test_file(GOOGLE_ANALOGIES).read_text().splitlines():
        if line.startswith(":"):
            section = line
            relation[section] = rng.normal(size=20)
            continue
        a, b, c, d = line.lower().split()
        for x, y in ((a, b), (c, d)):
            vec.setdefault(x, rng.normal(size=20))
            vec.setdefault(y, vec[x] + relation[section] + 0.8 * rng.normal(size=20))
    for name in (WORDSIM353, SIMLEX999):
        for line in gensim_test_file(name).read_text().splitlines():
            if not line.startswith("#"):
                for w in line.lower().split("\t")[:2]:
                    vec.setdefault(w, rng.normal(size=20))
    words = sorted(vec)
    words = [w for i, w in enumerate(words) if i % 13]  # ~8% out of vocabulary
    words += ["Athens", "LOVE", "Tiger"]  # variants: ignored by case-insensitive lookups
    matrix = np.stack([vec.get(w.lower(), rng.normal(size=20)) for w in words]).astype(np.float32)
    return words, matrix


def test_word_pair_scores_equal_gensims():
    words, matrix = evaluation_vectors()
    wv, kv = WordVectors(words, matrix), gensim_kv(words, matrix)
    for name in (WORDSIM353, SIMLEX999):
        path = gensim_test_file(name)
        ours = evaluate_word_pairs(wv, path)
        pearson, spearman, oov = kv.evaluate_word_pairs(str(path))
        assert ours.spearman == pytest.approx(spearman.statistic, abs=1e-9)
        assert ours.pearson == pytest.approx(pearson.statistic, abs=1e-6)  # gensim: float32 cosines
        assert 100 * ours.oov_ratio == pytest.approx(oov) and ours.oov > 0


def test_analogy_scores_equal_gensims(tmp_path):
    words, matrix = evaluation_vectors(seed=1)
    wv, kv = WordVectors(words, matrix), gensim_kv(words, matrix)
    lines = gensim_test_file(GOOGLE_ANALOGIES).read_text().splitlines()
    subset = tmp_path / "questions.txt"  # every 4th question of every section
    subset.write_text("\n".join(line for i, line in enumerate(lines) if line.startswith(":") or i % 4 == 0))
    for restrict in (300_000, 1500):
        ours = evaluate_analogies(wv, subset, restrict_vocab=restrict)
        score, sections = kv.evaluate_word_analogies(str(subset), restrict_vocab=restrict)
        assert ours.accuracy == pytest.approx(score) and 0.1 < ours.accuracy < 0.95
        assert ours.total == len(sections[-1]["correct"]) + len(sections[-1]["incorrect"])
        assert ours.sections["capital-common-countries"][0] == len(sections[0]["correct"])
        assert ours.oov > 0


def test_vectors_doctest():
    assert doctest.testmod(vectors_module).failed == 0


# ============================================================================ tier 4: invariance


def test_same_seed_same_vectors_and_save_load(tmp_path):
    corpus, vocab = make_corpus(tmp_path / "c", topic_docs(sentences=60))
    a, _ = train_word2vec(corpus, vocab.words, tiny_config(sample=1e-2))
    b, _ = train_word2vec(corpus, vocab.words, tiny_config(sample=1e-2))
    c, _ = train_word2vec(corpus, vocab.words, tiny_config(sample=1e-2, seed=4))
    assert torch.equal(a.input_vectors, b.input_vectors) and not torch.equal(a.input_vectors, c.input_vectors)
    same = Word2VecModel.load(a.save(tmp_path / "m"))
    assert torch.equal(same.output_vectors, a.output_vectors) and same.words == a.words and same.cfg == a.cfg
    wv = WordVectors.load(a.word_vectors().save(tmp_path / "v.txt", binary=False))
    assert np.array_equal(wv.vectors, a.input_vectors.numpy())


@pytest.mark.parametrize("sg", [True, False])
def test_resume_equals_uninterrupted(tmp_path, sg):
    corpus, vocab = make_corpus(tmp_path / "c", topic_docs(sentences=80))
    cfg = tiny_config(sg=sg, sample=1e-2, checkpoint_every=2)
    whole, full = train_word2vec(corpus, vocab.words, cfg)
    run = tmp_path / "run"
    _, first = train_word2vec(corpus, vocab.words, tiny_config(sg=sg, sample=1e-2, checkpoint_every=2,
                                                               max_minutes=1e-9), run_dir=run)
    assert first.stopped_early and first.epochs_done < 1  # killed by the time budget after one chunk
    resumed, rest = train_word2vec(corpus, vocab.words, cfg, run_dir=run)
    assert torch.equal(resumed.input_vectors, whole.input_vectors)
    assert torch.equal(resumed.output_vectors, whole.output_vectors)
    assert rest.effective_words == full.effective_words
    with pytest.raises(CheckpointError, match="different settings"):
        train_word2vec(corpus, vocab.words, tiny_config(sg=sg, sample=1e-2, checkpoint_every=2, window=2), run_dir=run)
    # a checkpoint from before batch_layout existed was cut into consecutive batches
    (state_file,) = (run / "checkpoints").glob("*/state.json")
    state = json.loads(state_file.read_text())
    del state["config"]["batch_layout"]
    state_file.write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match="batch_layout"):
        train_word2vec(corpus, vocab.words, cfg, run_dir=run)
    with pytest.raises(RunDirError, match="holds the checkpoints of an earlier run"):  # --fresh overwrites nothing
        train_word2vec(corpus, vocab.words, cfg, run_dir=run, resume=False)
    assert json.loads(state_file.read_text()) == state
    shutil.rmtree(run)


def test_a_window_run_resumes_exactly(tmp_path):
    """update=window: a run stopped after one chunk and resumed equals the uninterrupted run, and a
    checkpoint written with update=pair is not resumed as windows."""
    if word2vec_native.load() is None:
        pytest.skip("no C compiler here")
    corpus, vocab = make_corpus(tmp_path / "c", topic_docs(sentences=80))
    cfg = tiny_config(sample=1e-2, checkpoint_every=2, backend="auto", update="window")
    whole, _ = train_word2vec(corpus, vocab.words, cfg)
    run = tmp_path / "run"
    _, first = train_word2vec(corpus, vocab.words, tiny_config(sample=1e-2, checkpoint_every=2, backend="auto",
                                                               update="window", max_minutes=1e-9), run_dir=run)
    assert first.stopped_early and first.epochs_done < 1
    resumed, _ = train_word2vec(corpus, vocab.words, cfg, run_dir=run)
    assert torch.equal(resumed.input_vectors, whole.input_vectors)
    assert torch.equal(resumed.output_vectors, whole.output_vectors)
    with pytest.raises(CheckpointError, match="update"):
        train_word2vec(corpus, vocab.words, tiny_config(sample=1e-2, checkpoint_every=2, backend="auto"), run_dir=run)


# ============================================================================ quality smoke test


def test_vectors_learn_the_topics(tmp_path):
    corpus, vocab = make_corpus(tmp_path / "c", topic_docs(sentences=600))
    model, _ = train_word2vec(corpus, vocab.words, tiny_config(epochs=5))
    wv = model.word_vectors()
    same = np.mean([wv.similarity(f"a{i}", f"a{j}") for i in range(8) for j in range(i)])
    cross = np.mean([wv.similarity(f"a{i}", f"b{j}") for i in range(8) for j in range(8)])
    assert same > cross + 0.3
    assert all(w.startswith("b") for w, _ in wv.most_similar("b0", topn=5))


def test_vectors_command_similar_analogy_convert_evaluate(tmp_path, capsys):
    from muppets.cli import main as cli_main
    words = ["king", "queen", "man", "woman", "apple"]
    vecs = np.array([[1, 1, 0], [1, 0, 1], [0, 1, 0], [0, 0, 1], [-1, -1, -1]], dtype=np.float32)
    write_word2vec_format(tmp_path / "v.txt", words, vecs, binary=False)
    assert cli_main(["vectors", "similar", "king", "--vectors", str(tmp_path / "v.txt"), "--topn", "2"]) == 0
    top = capsys.readouterr().out.split()
    assert top[1] in ("queen", "man")
    assert cli_main(["vectors", "analogy", "man", "king", "woman", "--vectors", str(tmp_path / "v.txt"),
                     "--topn", "1"]) == 0
    assert capsys.readouterr().out.split()[1] == "queen"  # king - man + woman
    assert cli_main(["vectors", "convert", "--vectors", str(tmp_path / "v.txt"), "--to", "binary",
                     "--out", str(tmp_path / "v.bin")]) == 0
    assert KeyedVectors.load_word2vec_format(str(tmp_path / "v.bin"), binary=True).most_similar("king", topn=1)[0][0] \
        == top[1]
    assert cli_main(["vectors", "evaluate", "--vectors", str(tmp_path / "v.bin")]) == 0
    assert "WordSim-353" in capsys.readouterr().out
