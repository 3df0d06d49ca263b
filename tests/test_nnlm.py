"""NNLM (Bengio et al. 2003): tiny configs, the output computed by hand (eq. 1, with and without
direct connections) and its gradient vs autograd, the n-gram stream and deterministic batches,
training with the shared Trainer (perplexity beats the unigram; resume == uninterrupted), and
the embeddings exported in the word2vec format (gensim reads them)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from muppets.data.shards import ShardWriter, TokenCorpus
from muppets.errors import ConfigError
from muppets.models.nnlm import NNLM, NNLM_PRESETS, NNLMConfig
from muppets.objectives.nnlm import NNLMData, NNLMDataConfig, ngram_stream
from muppets.recipes.nnlm_pretrain import NNLMRunConfig, load_nnlm, perplexity_evaluator, run, unigram_baseline
from muppets.tokenizers.words import WordVocab
from muppets.train import TrainConfig, Trainer
from muppets.vectors import WordVectors


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def tiny(**kw) -> NNLM:
    torch.manual_seed(0)
    return NNLM(NNLMConfig(**{"vocab_size": 11, "context_size": 3, "embedding_dim": 4, "hidden_size": 5, **kw}))


def test_shapes_presets_and_checks():
    model = tiny()
    out = model(torch.randint(0, 11, (7, 3)))
    assert out.logits.shape == (7, 11) and out.encoded.layers[0].shape == (7, 3, 4)
    out = model(torch.randint(0, 11, (7, 3)), torch.randint(0, 11, (7,)))
    assert out.counts["lm"] == 7 and out.loss_sums["lm"].ndim == 0 and 0 <= int(out.correct["lm"]) <= 7
    assert set(NNLM_PRESETS) == {"nnlm-tiny", "nnlm-small", "nnlm-base"}
    assert NNLMConfig.preset("nnlm-base", vocab_size=50).context_size == 5
    with pytest.raises(ConfigError, match="direct or hidden"):
        NNLMConfig(vocab_size=5, hidden_size=0, direct=False)
    with pytest.raises(ConfigError, match="expected 3 context words"):
        model(torch.zeros(2, 4, dtype=torch.long))


@pytest.mark.parametrize("direct", [True, False])
def test_output_is_bengio_equation_one(direct):
    """y = b + W x + U tanh(d + H x) with x the concatenated context features; loss = CE(y)."""
    model = tiny(direct=direct)
    ids, labels = torch.tensor([[1, 2, 3], [4, 4, 0]]), torch.tensor([5, 6])
    C, H, d = model.embeddings.weight, model.hidden.weight, model.hidden.bias
    x = torch.cat([C[ids[:, 0]], C[ids[:, 1]], C[ids[:, 2]]], dim=1)  # (B, 12)
    U, b = model.output.weight[:, :5], model.output.bias
    y = b + torch.tanh(d + x @ H.T) @ U.T
    if direct:
        y = y + x @ model.output.weight[:, 5:].T  # W x
    assert torch.allclose(model(ids).logits, y, atol=1e-6)
    out = model(ids, labels)
    reference = F.cross_entropy(y, labels, reduction="sum")
    assert torch.allclose(out.loss_sums["lm"], reference, atol=1e-5)
    grads = torch.autograd.grad(out.loss_sums["lm"], [C, H, model.output.weight])
    expected = torch.autograd.grad(F.cross_entropy(model(ids).logits, labels, reduction="sum"), [C, H, model.output.weight])
    for g, e in zip(grads, expected):
        assert torch.allclose(g, e, atol=1e-5)


def make_corpus(path, docs: list[list[str]]) -> tuple[TokenCorpus, WordVocab]:
    vocab = WordVocab.build([s for d in docs for s in d], min_count=1)
    with ShardWriter(path, vocab_size=vocab.vocab_size) as writer:
        for doc in docs:
            writer.add_document([vocab.encode(s) for s in doc])
    return TokenCorpus(path), vocab


def test_ngram_stream_pads_documents_and_ends_sentences(tmp_path):
    corpus, vocab = make_corpus(tmp_path / "c", [["a b", "c"], ["d e f"]])
    stream, targets = ngram_stream(corpus, np.array([0, 1]), context=2, bos_id=vocab.bos_id, eos_id=vocab.eos_id)
    words = [vocab.words[i] for i in stream]
    assert words == ["<s>", "<s>", "a", "b", "</s>", "c", "</s>", "<s>", "<s>", "d", "e", "f", "</s>"]
    assert targets.tolist() == [2, 3, 4, 5, 6, 9, 10, 11, 12]


def repeating_docs(n: int = 40) -> list[list[str]]:
    """Documents of a deterministic cycle: the previous words predict the next one exactly."""
    words = "one two three four five six seven eight".split()
    return [[" ".join(words[(i + j) % 8] for j in range(6)) for i in range(5)] for _ in range(n)]


def test_batches_are_deterministic_and_split_evenly(tmp_path):
    corpus, vocab = make_corpus(tmp_path / "c", repeating_docs())
    data = NNLMData(corpus, 3, vocab.bos_id, vocab.eos_id, NNLMDataConfig(eval_fraction=0.1), 16, 2, seed=0)
    a, b = data.micro_batches(5, 0, 1), data.micro_batches(5, 0, 1)
    assert all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, b))
    one = NNLMData(corpus, 3, vocab.bos_id, vocab.eos_id, NNLMDataConfig(eval_fraction=0.1), 16, 1, seed=0)
    assert torch.equal(torch.cat([m["labels"] for m in a]), one.micro_batches(5, 0, 1)[0]["labels"])
    assert a[0]["input_ids"].shape == (8, 3) and data.normalizers(a[0]) == {"lm": 8.0}
    rank1 = data.micro_batches(5, 1, 2)  # DDP: rank 1 takes the second half of the global batch
    assert torch.equal(rank1[0]["labels"], one.micro_batches(5, 0, 1)[0]["labels"][8:12])


def train(tmp_path, corpus, vocab, steps: int = 60, resume: bool = False, stop_at: int = 0):
    """``steps`` updates of nnlm-tiny; ``stop_at`` interrupts the run there (checkpointed)."""
    torch.manual_seed(0)
    model = NNLM(NNLMConfig.preset("nnlm-tiny", vocab_size=len(vocab)))
    cfg = TrainConfig(steps=steps, batch_size=32, lr=3e-2, weight_decay=0.0, tensorboard=False,
                      progress=False, log_every=0, clip_grad_norm=0.0)
    data = NNLMData(corpus, 3, vocab.bos_id, vocab.eos_id, NNLMDataConfig(eval_fraction=0.1), 32, 1, seed=0)
    trainer = Trainer(model, data, cfg, tmp_path / "run", evaluate=perplexity_evaluator(data, 64),
                      should_stop=(lambda step, _: step >= stop_at) if stop_at else None,
                      eval_also_at=lambda step: step == stop_at)
    return model, data, trainer.train(resume=resume)


def test_training_beats_the_unigram_and_resumes_exactly(tmp_path):
    corpus, vocab = make_corpus(tmp_path / "c", repeating_docs())
    model, data, result = train(tmp_path / "a", corpus, vocab)
    ppl = result.last_eval["lm_perplexity"]
    baseline = unigram_baseline(data, len(vocab), 64)
    assert ppl < 0.5 * baseline["lm_perplexity"] and ppl < 3.0
    assert result.last_eval["lm_accuracy"] > baseline["lm_accuracy"] + 0.3
    _, _, first = train(tmp_path / "b", corpus, vocab, stop_at=30)
    assert first.stopped_early and first.step == 30
    resumed, _, second = train(tmp_path / "b", corpus, vocab, resume=True)
    assert second.step == 60 and len(second.losses) == 30
    for (name, p), q in zip(model.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(p, q), name


def test_embeddings_export_and_save_load(tmp_path):
    gensim = pytest.importorskip("gensim")
    model = tiny()
    words = ["<pad>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(7)]
    wv = model.word_vectors(words)
    assert wv.words == words[4:] and np.array_equal(wv.vectors, model.embeddings.weight[4:].detach().numpy())
    kv = gensim.models.KeyedVectors.load_word2vec_format(str(wv.save(tmp_path / "e.bin")), binary=True)
    assert kv.index_to_key == words[4:] and np.array_equal(kv.vectors, wv.vectors)
    same = NNLM.load(model.save(tmp_path / "m"))
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(same(ids).logits, model(ids).logits)


def test_recipe_end_to_end(tmp_path):
    text = tmp_path / "text"
    text.mkdir()
    for i, doc in enumerate(repeating_docs(12)):
        (text / f"d{i}.txt").write_text(". ".join(s.capitalize() for s in doc) + ".\n")
    cfg = NNLMRunConfig(run_dir=str(tmp_path / "run"))
    cfg.corpus.inputs, cfg.corpus.workers = [str(text)], 1
    cfg.model.preset = "nnlm-tiny"
    cfg.train = TrainConfig(steps=20, batch_size=16, lr=1e-2, tensorboard=False, progress=False, log_every=0)
    summary = run(cfg)
    assert summary["step"] == 20 and math.isfinite(summary["eval"]["lm_perplexity"])
    assert set(summary["unigram_baseline"]) == {"lm_perplexity", "lm_accuracy"}
    model, vocab = load_nnlm(summary["final"])
    assert model.cfg.vocab_size == len(vocab) and not model.training
    vectors = WordVectors.load(tmp_path / "run" / "embeddings.bin")
    assert "five" in vectors and vectors.vector_size == 16
