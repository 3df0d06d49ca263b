"""Feature-based transfer: layer plans, the layer combiner recomputed by hand, the BiLSTM task
models (padding invariance, gradients, save -> load), and whole runs on toy tasks with tiny
backbones: static vectors learn a sentiment task, ELMo mixed + static vectors + CRF learn a
tagging task over seeds, the embedded features are cached and reused, the learned mix is written
and plotted, and the ``muppets features`` command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from muppets.cli import main
from muppets.errors import ConfigError
from muppets.tasks.spec import TagExample, TaskData, TaskSpec, TextExample
from muppets.train import read_log
from muppets.transfer import feature_based, feature_cache
from muppets.transfer.feature_based import FeatureConfig, run, run_seeds
from muppets.transfer.feature_cache import plan_layers
from muppets.transfer.feature_models import (FeatureModelConfig, FeatureTaskModel, LayerCombiner,
                                             load_feature_model, save_feature_model)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny_backbones import tiny_bert, tiny_elmo, tiny_vectors  # noqa: E402

POS, NEG = ["good", "great"], ["bad", "awful"]
FILLER = ["the", "movie", "film", "plot", "was", "a", "and"]
PEOPLE, PLACES = ["john", "mary"], ["paris", "london"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def backbones(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("feature-backbones")
    return {"elmo": tiny_elmo(root / "elmo"), "bert": tiny_bert(root / "bert"),
            "vectors": tiny_vectors(root / "w2v.txt", dim=8)}


def sentiment_task(n_train: int = 64) -> TaskData:
    rng = np.random.default_rng(0)

    def example(split: str, i: int) -> TextExample:
        words = [str(w) for w in rng.choice(FILLER, 3)] + [str(rng.choice(POS if i % 2 else NEG))]
        rng.shuffle(words)
        return TextExample(f"{split}-{i}", " ".join(words), None, str(i % 2), "toy")

    splits = {s: [example(s, i) for i in range(n)] for s, n in (("train", n_train), ("dev", 24))}
    return TaskData(TaskSpec("toy-sst", "classify", ["0", "1"], "accuracy", ("sentence",)), splits)


def ner_task() -> TaskData:
    rng = np.random.default_rng(1)

    def sentence(i: int) -> TagExample:
        words = [str(w) for w in rng.choice(FILLER + PEOPLE + PLACES, 6)]
        tags = ["B-PER" if w in PEOPLE else "B-LOC" if w in PLACES else "O" for w in words]
        return TagExample(f"s{i}", words, tags, "toy")

    splits = {"train": [sentence(i) for i in range(48)], "dev": [sentence(i) for i in range(48, 60)],
              "test": [sentence(i) for i in range(60, 72)]}
    return TaskData(TaskSpec("toy-ner", "tag", ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"], "entity_f1",
                             ("tokens",)), splits)


def cfg_for(tmp_path: Path, model: Path, **kw) -> FeatureConfig:
    base = dict(model=str(model), run_dir=str(tmp_path / "run"), cache_dir=str(tmp_path / "cache"), hidden=16,
                batch_size=8, epochs=6, lr=1e-2, dropout=0.0, patience=0, progress=False, log_every=0)
    base.update(kw)
    return FeatureConfig(**base)


# ----------------------------------------------------------------------------- by hand


def test_plan_layers_modes_and_errors():
    assert plan_layers("last", 7) == ([6], "single")
    assert plan_layers("last4sum", 7) == ([3, 4, 5, 6], "sum")
    assert plan_layers("0", 3) == ([0], "single")
    assert plan_layers("last4cat", 1) == ([0], "single")  # static vectors: one layer whatever the mode
    with pytest.raises(ConfigError, match="only 3 layers"):
        plan_layers("last4cat", 3)
    with pytest.raises(ConfigError, match="layer 5 does not exist"):
        plan_layers("5", 3)
    with pytest.raises(ConfigError, match="layers"):
        FeatureConfig(layers="top")


def test_layer_combiner_by_hand():
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(2, 3, 4, 5, generator=g)  # (B, K, T, D)
    mask = torch.ones(2, 4, dtype=torch.bool)
    mix = LayerCombiner("mix", 3)
    with torch.no_grad():
        mix.mix.logits.copy_(torch.tensor([0.5, -1.0, 2.0]))
        mix.mix.gamma.fill_(0.7)
    s = np.exp([0.5, -1.0, 2.0]) / np.exp([0.5, -1.0, 2.0]).sum()
    want = 0.7 * np.einsum("k,bktd->btd", s, feats.numpy())
    np.testing.assert_allclose(mix(feats, mask).detach().numpy(), want, atol=1e-6)
    assert mix.weights()["weights"] == pytest.approx(s.tolist()) and mix.weights()["gamma"] == pytest.approx(0.7)
    np.testing.assert_allclose(LayerCombiner("sum", 3)(feats, mask).numpy(), feats.sum(1).numpy(), atol=1e-6)
    cat = LayerCombiner("cat", 3)(feats, mask)
    assert cat.shape == (2, 4, 15) and torch.equal(cat[1, 2, 5:10], feats[1, 1, 2])
    assert torch.equal(LayerCombiner("single", 1)(feats[:, :1], mask), feats[:, 0])
    assert LayerCombiner("sum", 3).weights() is None


def _model(kind: str, **kw) -> FeatureTaskModel:
    torch.manual_seed(0)
    cfg = FeatureModelConfig(kind=kind, num_labels=3, num_layers=3, dim=6, combine="mix", hidden=5,
                             extra_dim=4, dropout=0.1, **kw)
    return FeatureTaskModel(cfg)


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = [5, 2, 3]
    mask = torch.arange(5)[None, :] < torch.tensor(lengths)[:, None]
    feats, extra = torch.randn(3, 3, 5, 6, generator=g), torch.randn(3, 5, 4, generator=g)
    labels = torch.randint(0, 3, (3, 5), generator=g).masked_fill(~mask, -100)
    return feats, extra, mask, labels


@pytest.mark.parametrize("kind, kw", [("classify", {"pool": "max"}), ("classify", {"pool": "mean"}),
                                      ("tag", {"crf": False}), ("tag", {"crf": True})])
def test_task_model_ignores_padding_and_every_parameter_learns(kind, kw):
    model = _model(kind, **kw).eval()
    feats, extra, mask, labels = _inputs()
    batch = model.predict(feats, mask, extra)
    for b, n in enumerate(mask.sum(1).tolist()):
        alone = model.predict(feats[b:b + 1, :, :n], mask[b:b + 1, :n], extra[b:b + 1, :n])[0]
        assert alone == batch[b]
        noisy = feats.clone()
        noisy[:, :, n:] = 1e3  # garbage in the padding changes nothing
        assert model.predict(noisy[b:b + 1], mask[b:b + 1], extra[b:b + 1])[0] == batch[b]
    model.train()
    targets = labels if kind == "tag" else labels[:, 0]
    model(feats, mask, targets, extra).loss_sums["task"].backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum()]
    assert not missing


def test_save_load_gives_identical_predictions(tmp_path):
    model = _model("tag", crf=True, layer_norm=True).eval()
    feats, extra, mask, _ = _inputs(3)
    save_feature_model(model, tmp_path / "m", {"labels": ["a", "b", "c"]})
    back, meta = load_feature_model(tmp_path / "m")
    assert meta["labels"] == ["a", "b", "c"] and back.cfg == model.cfg
    assert back.predict(feats, mask, extra) == model.predict(feats, mask, extra)
    torch.testing.assert_close(back(feats, mask, extra=extra).logits, model(feats, mask, extra=extra).logits)


# ----------------------------------------------------------------------------- runs


def test_static_vectors_learn_sentiment_and_the_cache_is_reused(backbones, tmp_path, monkeypatch):
    data = sentiment_task()
    # the model after 6 epochs: a 6-sentence selection slice is all right from epoch 2 on
    summary = run(cfg_for(tmp_path, backbones["vectors"], selection="last"), data=data)
    assert summary["dev"]["accuracy"] >= 0.9 and summary["selection"] == "last"
    assert summary["backbone"]["kind"] == "static" and summary["backbone"]["combine"] == "single"
    assert "mix" not in summary
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert written["dev"] == summary["dev"]
    lines = (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 24 and json.loads(lines[0])["prediction"] in ("0", "1")
    assert len(list((tmp_path / "cache").glob("toy-sst-*.safetensors"))) == 2  # train + dev

    def no_model(*args, **kwargs):
        raise AssertionError("the backbone was loaded although the features are cached")

    monkeypatch.setattr(feature_cache, "load_embedder", no_model)
    again = run(cfg_for(tmp_path, backbones["vectors"], run_dir=str(tmp_path / "run2"), hidden=8, pool="mean"),
                data=data)
    assert again["backbone"]["counts"] == summary["backbone"]["counts"]
    assert summary["backbone"]["counts"]["train"]["words"] == sum(len(ex.text.split()) for ex in data["train"])


def test_elmo_mix_with_static_vectors_and_crf_over_seeds(backbones, tmp_path):
    cfg = cfg_for(tmp_path, backbones["elmo"], layers="mix", static=str(backbones["vectors"]), crf=True,
                  layer_norm=True, epochs=8)
    summary = run_seeds(cfg, [1, 2], data=ner_task())
    assert summary["dev"]["f1"]["mean"] >= 0.8 and len(summary["test"]["f1"]["values"]) == 2
    mix = summary["mix"]
    assert mix["labels"] == ["token", "biLSTM 1", "biLSTM 2"] and sum(mix["weights"]) == pytest.approx(1.0)
    seed_dir = tmp_path / "run" / "seed-1"
    assert (seed_dir / "mix_weights.png").stat().st_size > 1000
    assert json.loads((seed_dir / "mix_weights.json").read_text())["layers"] == [0, 1, 2]
    evals = [r for r in read_log(seed_dir) if "eval/mix_w0" in r]  # the mix is logged at every evaluation
    assert evals and all(abs(sum(r[f"eval/mix_w{k}"] for k in range(3)) - 1) < 1e-5 for r in evals)
    metrics = json.loads((seed_dir / "metrics.json").read_text())
    assert metrics["static_vectors"]["counts"]["test"]["oov"] == 0 and metrics["backbone"]["dim"] == 32


def test_bert_layer_modes_and_task_errors(backbones, tmp_path):
    data = ner_task()
    with pytest.raises(ConfigError, match="only 3 layers"):
        run(cfg_for(tmp_path, backbones["bert"], layers="last4sum"), data=data)
    summary = run(cfg_for(tmp_path, backbones["bert"], layers="-1", epochs=1, crf=False), data=data)
    assert summary["backbone"]["layers"] == [2] and "f1" in summary["test"]
    span = TaskData(TaskSpec("qa", "span", [], "squad", ("question", "context")), {"train": []})
    with pytest.raises(ConfigError, match="span task"):
        run(cfg_for(tmp_path, backbones["bert"]), data=span)


def test_cli_features_on_your_own_files(backbones, tmp_path, capsys):
    data = sentiment_task(32)
    for split in ("train", "dev"):
        rows = ["text,label"] + [f"{ex.text},{ex.label}" for ex in data.splits[split]]
        (tmp_path / f"{split}.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    code = main(["features", str(tmp_path / "train.csv"), "--dev", str(tmp_path / "dev.csv"), "--model",
                 str(backbones["elmo"]), "--layers", "mix", f"run_dir={tmp_path / 'cli'}",
                 f"cache_dir={tmp_path / 'cache'}", "epochs=1", "hidden=8", "progress=false"])
    printed = capsys.readouterr().out
    assert code == 0 and "learned layer weights: token" in printed
    assert "dev (24 examples)  accuracy" in printed  # every figure names its split and size
    assert (tmp_path / "cli" / "mix_weights.png").is_file()
    assert main(["features", "sst2", "--model", str(backbones["elmo"]), "--layers", "nine"]) == 2
    assert "layers" in capsys.readouterr().err


def test_doctests():
    import doctest

    from muppets.analysis import layer_weights

    for module in (feature_based, feature_cache, layer_weights):
        assert doctest.testmod(module).failed == 0


def test_a_signal_stops_the_run_without_a_result_and_the_rerun_resumes_it(backbones, tmp_path, monkeypatch):
    """SIGTERM mid-run: TrainingInterrupted, no metrics.json (a table would not take the half-trained
    run for a result); the same call again resumes and ends as the uninterrupted run does."""
    import os
    import signal

    from muppets.errors import TrainingInterrupted
    from muppets.train.trainer import Trainer

    data = sentiment_task()
    whole = run(cfg_for(tmp_path, backbones["vectors"], run_dir=str(tmp_path / "whole")), data=data)
    original, calls = Trainer._train_step, []

    def step_then_signal(self):
        stats = original(self)
        calls.append(self.step)
        if len(calls) == 5:
            os.kill(os.getpid(), signal.SIGTERM)  # the trainer's handler finishes the step and checkpoints
        return stats

    monkeypatch.setattr(Trainer, "_train_step", step_then_signal)
    cfg = cfg_for(tmp_path, backbones["vectors"], run_dir=str(tmp_path / "cut"))
    with pytest.raises(TrainingInterrupted, match="run the same command again"):
        run(cfg, data=data)
    assert not (tmp_path / "cut" / "metrics.json").exists()
    again = run(cfg, data=data)
    assert calls[5] == 6  # resumed after the 5th step, not from scratch
    assert again["dev"] == whole["dev"] and again["steps"] == whole["steps"]


def test_mix_l2_penalty_is_lambda_times_squared_logits_and_pulls_toward_the_average(backbones, tmp_path):
    """ELMo's lambda * |w|^2 (section 3.2): the loss term by hand, its config checks, and in a run a
    large lambda keeps the learned weights near the uniform average while lambda = 0 lets them move."""
    model = _model("tag", mix_l2=0.5)
    with torch.no_grad():
        model.combiner.mix.logits.copy_(torch.tensor([1.0, -2.0, 0.5]))
    feats, extra, mask, labels = _inputs()
    out = model(feats, mask, labels, extra)
    assert float(out.loss_sums["mix_l2"].detach()) == pytest.approx(0.5 * (1 + 4 + 0.25))
    assert "mix_l2" not in _model("tag")(feats, mask, labels, extra).loss_sums
    with pytest.raises(ConfigError, match="mix_l2"):
        FeatureConfig(layers="last", mix_l2=0.1)
    with pytest.raises(ConfigError, match="mix_l2"):
        FeatureConfig(mix_l2=-1.0)

    spread = {}
    for lam in (0.0, 1.0):
        cfg = cfg_for(tmp_path, backbones["elmo"], layers="mix", run_dir=str(tmp_path / f"l2-{lam}"), epochs=4,
                      mix_l2=lam)
        weights = run(cfg, data=ner_task())["mix"]["weights"]
        spread[lam] = max(weights) - min(weights)
        logged = [r for r in read_log(tmp_path / f"l2-{lam}") if "loss/mix_l2" in r]
        assert bool(logged) == (lam > 0)  # the penalty is a logged loss term
    assert spread[1.0] < spread[0.0] / 3
