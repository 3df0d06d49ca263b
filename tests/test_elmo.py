"""ELMo: building blocks by hand (characters, highway, char CNN, reversal), the tiny biLM (shapes,
gradients, save -> load), invariances (each direction sees only its side, padding changes
nothing, exact data determinism, resume == uninterrupted) and learning on a repetitive corpus
through the recipe, well below the unigram entropy. The original size is checked on the meta
device against the published 93.6M parameters."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from muppets.errors import CheckpointError, ConfigError, DataError
from muppets.models.elmo import (
    IGNORE,
    ElmoBackbone,
    ElmoConfig,
    ElmoLanguageModel,
    reverse_padded,
)
from muppets.nn.char_cnn import CharCNN
from muppets.nn.highway import Highway
from muppets.nn.scalar_mix import ScalarMix
from muppets.objectives.bilm import BiLMData, BiLMDataConfig, bracketed_stream, lm_targets, windows
from muppets.recipes import elmo_pretrain
from muppets.recipes.elmo_pretrain import load_elmo, save_elmo
from muppets.tokenizers.characters import BOS_CHAR, BOW_CHAR, EOS_CHAR, EOW_CHAR, PAD_CHAR, CharacterMapper
from muppets.tokenizers.words import WordVocab
from muppets.train import Trainer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _tiny_corpora import word_corpus  # noqa: E402

SENTENCES = [["The", "cat", "sat", "."], ["Dogs", "bark", "loudly", "at", "night", "!"], ["Hi"]]


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_model(vocab_size: int = 40, seed: int = 0, **overrides) -> ElmoLanguageModel:
    torch.manual_seed(seed)
    return ElmoLanguageModel(ElmoConfig.preset("elmo-tiny", vocab_size=vocab_size, **overrides))


@pytest.fixture(scope="module")
def corpus_setup(tmp_path_factory):
    """The generated 46-document corpus as word ids of a (cased, every word) vocabulary."""
    root = tmp_path_factory.mktemp("elmo")
    return (root, *word_corpus(root))


# ----------------------------------------------------------------------------- by hand


def test_characters_by_hand():
    chars = CharacterMapper()
    cat = chars.word_ids("cat")
    assert cat[:5].tolist() == [BOW_CHAR, ord("c") + 1, ord("a") + 1, ord("t") + 1, EOW_CHAR]
    assert (cat[5:] == PAD_CHAR).all() and cat.shape == (50,)
    assert chars.word_ids("<s>")[:4].tolist() == [BOW_CHAR, BOS_CHAR, EOW_CHAR, PAD_CHAR]
    assert chars.word_ids("</s>")[:3].tolist() == [BOW_CHAR, EOS_CHAR, EOW_CHAR]
    assert not chars.word_ids("<pad>").any()
    assert chars.word_ids("é")[:4].tolist() == [BOW_CHAR, 0xC3 + 1, 0xA9 + 1, EOW_CHAR]  # two UTF-8 bytes
    long = chars.word_ids("x" * 60)
    assert (long[1:49] == ord("x") + 1).all() and long[49] == EOW_CHAR  # cut to 48 bytes
    ids, mask = chars.batch(SENTENCES)
    assert ids.shape == (3, 8, 50) and mask.sum(1).tolist() == [6, 8, 3]
    assert torch.equal(ids[2, 1], torch.from_numpy(chars.word_ids("Hi")).long()) and not ids[2, 3:].any()
    with pytest.raises(ConfigError):
        CharacterMapper(max_chars=2)


def test_highway_by_hand():
    torch.manual_seed(0)
    hw = Highway(3, num_layers=1, carry_bias=2.0)
    layer = hw.layers[0]
    assert torch.equal(layer.bias[3:], torch.full((3,), 2.0)) and not layer.bias[:3].any()
    x = torch.randn(2, 3)
    W, b = layer.weight.detach().numpy(), layer.bias.detach().numpy()
    xn = x.numpy()
    h = np.maximum(xn @ W[:3].T + b[:3], 0.0)
    g = 1.0 / (1.0 + np.exp(-(xn @ W[3:].T + b[3:])))
    assert np.allclose(hw(x).detach().numpy(), g * xn + (1 - g) * h, atol=1e-6)


def test_char_cnn_by_hand():
    torch.manual_seed(0)
    cnn = CharCNN(num_chars=10, char_dim=2, filters=[[1, 2], [3, 1]], activation="tanh")
    ids = torch.tensor([[1, 2, 3, 4, 0], [5, 5, 9, 0, 0]])
    e = cnn.embed.weight.detach().numpy()[ids.numpy()]  # (N, C, E)
    expected = np.zeros((2, 3))
    column = 0
    for conv in cnn.convs:
        K, b = conv.weight.detach().numpy(), conv.bias.detach().numpy()  # (n, E, w), (n,)
        n, _, w = K.shape
        for i in range(2):
            for j in range(n):
                maps = [(K[j] * e[i, t:t + w].T).sum() for t in range(5 - w + 1)]  # one filter over time
                expected[i, column + j] = np.tanh(max(maps) + b[j])
        column += n
    assert np.allclose(cnn(ids).detach().numpy(), expected, atol=1e-6)
    assert cnn(ids[None]).shape == (1, 2, 3) and not cnn.embed.weight[0].any()
    with pytest.raises(ValueError, match="widest"):
        cnn(ids[:, :2])


def test_reverse_padded_by_hand():
    x = torch.arange(8).reshape(2, 4)[..., None].float()  # (2, 4, 1)
    out = reverse_padded(x, torch.tensor([4, 2]))[..., 0]
    assert out.tolist() == [[3, 2, 1, 0], [5, 4, 6, 7]]  # padding stays in place
    assert torch.equal(reverse_padded(reverse_padded(x, torch.tensor([3, 1])), torch.tensor([3, 1])), x)


# ----------------------------------------------------------------------------- tiny model


def _batch(V: int = 40, seed: int = 0):
    ids, mask = CharacterMapper().batch(SENTENCES)
    g = torch.Generator().manual_seed(seed)
    nxt = torch.randint(0, V, mask.shape, generator=g).masked_fill(~mask, IGNORE)
    prv = torch.randint(0, V, mask.shape, generator=g).masked_fill(~mask, IGNORE)
    return {"char_ids": ids, "mask": mask, "next_ids": nxt, "prev_ids": prv}


def test_shapes_gradients_and_mix():
    model = tiny_model()
    batch = _batch()
    out = model(**batch)
    enc = out.encoded
    assert len(enc.layers) == 3 and all(h.shape == (3, 8, 32) for h in enc.layers)
    assert torch.equal(enc.layers[0][..., :16], enc.layers[0][..., 16:])  # [x; x]
    assert not enc.layers[2][~batch["mask"]].any()  # padding is 0
    assert set(out.loss_sums) == {"fwd", "bwd"} and float(out.counts["fwd"]) == 17
    assert abs(out.loss_sums["fwd"].item() / 17 - math.log(40)) < 0.5  # ~uniform at init
    (out.loss_sums["fwd"] + out.loss_sums["bwd"]).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()]
    assert missing == []
    mixed = ScalarMix(3, layer_norm=True)(enc.layers, enc.mask)
    assert mixed.shape == (3, 8, 32)
    with pytest.raises(ValueError, match="outside the softmax"):
        model(**{**batch, "next_ids": batch["next_ids"].masked_fill(batch["mask"], 40)})


def test_save_load_gives_identical_outputs(tmp_path, corpus_setup):
    _, vocab, _ = corpus_setup
    model = tiny_model().eval()
    save_elmo(model, vocab, tmp_path / "m", run_config={"note": 1})
    again, vocab2 = load_elmo(tmp_path / "m")
    batch = _batch()
    with torch.no_grad():
        a, b = model(**batch), again(**batch)
    assert all(torch.equal(x, y) for x, y in zip(a.encoded.layers, b.encoded.layers))
    assert torch.equal(a.loss_sums["bwd"], b.loss_sums["bwd"]) and vocab2.words == vocab.words
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json", "model.safetensors",
                                                                  "muppets_config.json", "vocab"]
    (tmp_path / "m" / "config.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(CheckpointError, match="format"):
        load_elmo(tmp_path / "m")


def test_presets_and_original_parameter_count():
    orig = ElmoConfig.preset("elmo-original")
    sizes = (orig.num_filters, orig.lstm_dim, orig.projection_dim, orig.num_highway, orig.char_dim)
    assert sizes == (2048, 4096, 512, 2, 16)
    with torch.device("meta"):
        n = sum(p.numel() for p in ElmoBackbone(orig).parameters())
    assert abs(n / 93.6e6 - 1) < 0.002  # "93.6 million parameters" (AllenNLP's ELMo page), softmax excluded
    assert ElmoConfig.preset("elmo-small").num_filters == 512
    with pytest.raises(ConfigError, match="unknown ELMo preset"):
        ElmoConfig.preset("elmo-huge")
    with pytest.raises(ConfigError, match="widest filter"):
        ElmoConfig.preset("elmo-tiny", max_chars=2)
    with pytest.raises(ConfigError, match="lstm_dim"):
        ElmoConfig.preset("elmo-tiny", lstm_dim=8)


# ----------------------------------------------------------------------------- invariances


def test_each_direction_sees_only_its_side():
    model = tiny_model(dropout=0.0).eval()
    ids, mask = CharacterMapper().batch([["a", "b", "c", "d", "e", "f"]])  # 8 tokens with <s> </s>
    k = 4
    changed = ids.clone()
    changed[0, k] = torch.from_numpy(CharacterMapper().word_ids("zebra")).long()
    with torch.no_grad():
        s0, s1 = model.backbone.states(ids, mask), model.backbone.states(changed, mask)
    for f0, f1, b0, b1 in zip(s0.forward, s1.forward, s0.backward, s1.backward):
        assert torch.equal(f0[:, :k], f1[:, :k]) and not torch.allclose(f0[:, k:], f1[:, k:])
        assert torch.equal(b0[:, k + 1:], b1[:, k + 1:]) and not torch.allclose(b0[:, :k + 1], b1[:, :k + 1])


def test_padding_changes_nothing_for_real_tokens():
    model = tiny_model(dropout=0.0).eval()
    chars = CharacterMapper()
    with torch.no_grad():
        together = model.backbone(*chars.batch(SENTENCES))
        for i, sentence in enumerate(SENTENCES):
            alone = model.backbone(*chars.batch([sentence]))
            n = len(sentence) + 2
            for a, b in zip(alone.layers, together.layers):
                assert torch.allclose(a[0, :n], b[i, :n], atol=1e-6)
        left = torch.zeros(1, 3, dtype=torch.bool)
        left[0, 2] = True
        with pytest.raises(ValueError, match="right-padded"):
            model.backbone(chars.batch([["x"]])[0], left)


# ----------------------------------------------------------------------------- data


def test_stream_windows_and_targets_by_hand(corpus_setup):
    _, vocab, corpus = corpus_setup
    stream, bounds = bracketed_stream(corpus, vocab.bos_id, vocab.eos_id)
    first = corpus.sentence(0).tolist()
    assert stream[:len(first) + 2].tolist() == [vocab.bos_id, *first, vocab.eos_id]
    assert len(stream) == corpus.num_tokens + 2 * corpus.num_sentences and bounds[-1, 1] == len(stream)
    starts, lengths = windows(np.array([[0, 10], [10, 13]]), 4)
    assert starts.tolist() == [0, 3, 6, 10] and lengths.tolist() == [4, 4, 4, 3]  # each doc alone
    ids = np.array([[2, 7, 3, 2, 9], [2, 8, 0, 0, 0]])  # <s> w </s> <s> w | <s> w pad…
    mask = ids != 0
    nxt, prv = lm_targets(ids, mask, softmax_size=8, vocab=vocab)
    assert nxt.tolist() == [[7, 3, IGNORE, 1, IGNORE], [1, IGNORE, IGNORE, IGNORE, IGNORE]]  # 8, 9 -> <unk>
    assert prv.tolist() == [[IGNORE, 2, 7, IGNORE, 2], [IGNORE, 2, IGNORE, IGNORE, IGNORE]]


def test_data_is_deterministic_covers_every_target_once_and_splits_ranks(corpus_setup):
    _, vocab, corpus = corpus_setup
    data = BiLMData(corpus, vocab, BiLMDataConfig(window=12, eval_fraction=0.1), batch_size=4,
                    accumulation=1, seed=3, softmax_size=60)
    a = data.micro_batches(5, 0, 1)[0]
    same = BiLMData(corpus, vocab, BiLMDataConfig(window=12, eval_fraction=0.1), 4, 1, 3, 60).micro_batches(5, 0, 1)[0]
    assert all(torch.equal(a[k], same[k]) for k in a)
    other = BiLMData(corpus, vocab, BiLMDataConfig(window=12, eval_fraction=0.1), 4, 1, 4, 60).micro_batches(5, 0, 1)[0]
    assert not torch.equal(a["char_ids"], other["char_ids"])
    halves = [data.micro_batches(5, r, 2)[0] for r in (0, 1)]
    width = max(h["mask"].shape[1] for h in halves)
    pad = [torch.nn.functional.pad(h["mask"], (0, width - h["mask"].shape[1])) for h in halves]
    assert torch.equal(torch.cat(pad)[:, :a["mask"].shape[1]], a["mask"])  # ranks split the global batch
    assert a["char_ids"].shape[:2] == a["mask"].shape and a["char_ids"].shape[2] == 50
    assert data.normalizers(a) == {"fwd": float((a["next_ids"] != IGNORE).sum()),
                                   "bwd": float((a["prev_ids"] != IGNORE).sum())}
    # one epoch of windows: every training token is a forward target once (but <s>) and a backward one (but </s>)
    starts, lengths = data.train_windows
    batch = data.collate([data.stream[s:s + n] for s, n in zip(starts, lengths)])
    train_tokens = sum(int(e - s) for s, e in data.train_bounds)
    n_sent = corpus.num_sentences - sum(len(corpus.document_sentences(int(d))) for d in data.eval_docs)
    assert int((batch["next_ids"] != IGNORE).sum()) == train_tokens - n_sent
    assert int((batch["prev_ids"] != IGNORE).sum()) == train_tokens - n_sent
    # held-out windows lie outside every training document
    assert len(data.train_bounds) + len(data.eval_docs) == corpus.num_documents
    inside = [(s >= data.train_bounds[:, 0]) & (s < data.train_bounds[:, 1]) for s in data.eval_windows[0]]
    assert not np.any(inside) and sum(int(b["mask"].sum()) for b in data.eval_batches(8)) > 0


def test_data_rejects_a_corpus_of_another_vocabulary(corpus_setup):
    _, vocab, corpus = corpus_setup
    other = WordVocab(vocab.words[:4] + vocab.words[4:][::-1], vocab.counts, vocab.settings)
    with pytest.raises(DataError, match="another word vocabulary"):
        BiLMData(corpus, other, BiLMDataConfig(), 4, 1, 0, softmax_size=20)
    with pytest.raises(ConfigError, match="softmax size"):
        BiLMData(corpus, vocab, BiLMDataConfig(), 4, 1, 0, softmax_size=10**6)


def _trainer(run_dir: Path, corpus_setup, steps: int) -> Trainer:
    _, vocab, corpus = corpus_setup
    cfg = elmo_pretrain.load_config(None, [f"run_dir={run_dir}", "model.preset=elmo-tiny", f"train.steps={steps}",
                                           "train.batch_size=4", "train.lr=3e-3", "train.schedule=constant",
                                           "train.progress=false",
                                           "train.tensorboard=false", "train.checkpoint_every=2", "train.log_every=0"])
    torch.manual_seed(0)
    model = ElmoLanguageModel(ElmoConfig.preset("elmo-tiny", vocab_size=60))
    data = BiLMData(corpus, vocab, BiLMDataConfig(window=12), 4, 1, 0, softmax_size=60)
    return Trainer(model, data, cfg.train, run_dir)


def test_resume_equals_uninterrupted(tmp_path, corpus_setup):
    straight = _trainer(tmp_path / "a", corpus_setup, 4).train(resume=False)
    _trainer(tmp_path / "b", corpus_setup, 2).train(resume=False)
    resumed = _trainer(tmp_path / "b", corpus_setup, 4).train(resume=True)
    assert resumed.losses == straight.losses[2:]  # dropout included: the RNG state is restored too


# ----------------------------------------------------------------------------- learning


def test_recipe_learns_a_repetitive_corpus(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    lines = ["The cat sat on the mat.", "A dog ran to the old park.", "Birds sing in the morning."]
    docs = ["\n".join(lines[(d + i) % 3] for i in range(6)) for d in range(12)]
    (raw / "docs.txt").write_text("\n\n".join(docs) + "\n")
    cfg = elmo_pretrain.load_config(None, [
        f"run_dir={tmp_path / 'run'}", "model.preset=elmo-tiny", "model.overrides={dropout: 0.0}",
        f"corpus.inputs=['{raw}']", "corpus.workers=1", "data.window=16", "data.eval_fraction=0.2",
        "train.steps=80", "train.batch_size=16", "train.lr=1e-2", "train.warmup_steps=5", "train.eval_every=0",
        "train.log_every=0", "train.progress=false", "train.tensorboard=false", "device=cpu"])
    summary = elmo_pretrain.run(cfg, resume=False)
    ev, base = summary["eval"], summary["unigram_baseline"]
    for k in ("fwd", "bwd"):
        unigram_entropy = math.log(base[f"{k}_perplexity"])
        assert ev[f"{k}_loss"] < 0.25 * unigram_entropy, (k, ev, base)  # measured: ~0.2 vs 2.9 nats
    model, vocab = load_elmo(tmp_path / "run" / "final")
    assert (tmp_path / "run" / "vocab" / "words.txt").is_file() and vocab.token_to_id("cat") is not None
    again = elmo_pretrain.ensure_vocab(cfg, tmp_path / "run")
    assert again.words == vocab.words  # counted once, reused


def test_an_elmo_preset_picks_the_elmo_recipe(tmp_path):
    from muppets.recipes import pick_recipe
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  preset: elmo-small\n")
    assert pick_recipe(cfg, []) is elmo_pretrain
