"""Mixed precision: the config is checked, bf16 autocast trains with fp32 weights and an fp32
output softmax, and its loss and gradients stay close to fp32's on a tiny BERT."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toy_train import ToyData, ToyModel, toy_config  # noqa: E402

from muppets.errors import ConfigError
from muppets.models.bert import BertConfig, BertForPreTraining
from muppets.nn.linear_ce import linear_cross_entropy
from muppets.train import Trainer, TrainConfig
from muppets.train.precision import autocast, resolve_precision


def test_resolve_precision_choices():
    cpu = torch.device("cpu")
    assert resolve_precision("fp32", cpu) is None
    assert resolve_precision("bf16", cpu) is torch.bfloat16
    assert resolve_precision("auto", cpu) in (None, torch.bfloat16)
    with pytest.raises(ConfigError, match="precision"):
        resolve_precision("fp16x", cpu)
    with pytest.raises(ConfigError, match="train.precision"):
        TrainConfig(precision="half")


def test_linear_cross_entropy_under_autocast_is_fp32():
    torch.manual_seed(0)
    h = torch.randn(7, 16, requires_grad=True)
    w = torch.randn(50, 16, requires_grad=True)
    b = torch.zeros(50, requires_grad=True)
    y = torch.randint(0, 50, (7,))
    ref, _ = linear_cross_entropy(h, w, b, y)
    with autocast(torch.device("cpu"), torch.bfloat16):
        hb = h * 1.0  # a bf16-autocast region hands the head bf16 activations in a real model
        loss, _ = linear_cross_entropy(hb.to(torch.bfloat16), w, b, y)
    assert loss.dtype == torch.float32
    loss.backward()
    assert w.grad.dtype == torch.float32 and h.grad.dtype == torch.float32
    assert abs(loss.item() - ref.item()) / ref.item() < 1e-2  # only h was rounded to bf16


def _bert_grads(precision: str) -> tuple[float, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4,
                     intermediate_size=64, max_position_embeddings=32, hidden_dropout=0.0,
                     attention_dropout=0.0)
    model = BertForPreTraining(cfg)
    g = torch.Generator().manual_seed(1)
    batch = {"input_ids": torch.randint(5, 64, (4, 12), generator=g),
             "token_type_ids": torch.zeros(4, 12, dtype=torch.long),
             "attention_mask": torch.ones(4, 12, dtype=torch.bool),
             "mlm_positions": torch.tensor([[1, 3, 5]] * 4),
             "mlm_labels": torch.randint(5, 64, (4, 3), generator=g),
             "nsp_labels": torch.tensor([0, 1, 0, 1])}
    with autocast(torch.device("cpu"), resolve_precision(precision, torch.device("cpu"))):
        out = model(**batch)
        loss = sum(out.loss_sums.values())
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_bf16_bert_step_close_to_fp32():
    loss32, grads32 = _bert_grads("fp32")
    loss16, grads16 = _bert_grads("bf16")
    assert abs(loss16 - loss32) / loss32 < 2e-2
    for name, g in grads32.items():
        assert grads16[name].dtype == torch.float32, name  # weights and their grads stay fp32
        cos = torch.nn.functional.cosine_similarity(g.flatten(), grads16[name].flatten(), dim=0)
        assert cos > 0.98, (name, float(cos))


def test_trainer_bf16_learns_and_keeps_fp32_weights(tmp_path):
    config = toy_config(steps=30, precision="bf16")
    data = ToyData(config.batch_size, config.accumulation)
    model = ToyModel(dropout=0.0)
    result = Trainer(model, data, config, tmp_path).train()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert result.losses[-1] < result.losses[0] * 0.9


def test_bf16_on_a_cpu_that_emulates_it_warns_once_and_auto_stays_fp32(monkeypatch, caplog):
    from muppets.train import precision

    cpu = torch.device("cpu")
    monkeypatch.setattr(precision, "_WARNED", set())
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    with caplog.at_level("WARNING", logger="muppets.train.precision"):
        assert resolve_precision("auto", cpu) is None and not caplog.records
        assert resolve_precision("bf16", cpu) is torch.bfloat16 and resolve_precision("bf16", cpu) is torch.bfloat16
    assert len(caplog.records) == 1 and "emulated and slower than fp32" in caplog.text
    caplog.clear()
    monkeypatch.setattr(precision, "_WARNED", set())
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    with caplog.at_level("WARNING", logger="muppets.train.precision"):
        assert resolve_precision("auto", cpu) is torch.bfloat16 and resolve_precision("bf16", cpu) is torch.bfloat16
    assert not caplog.records


# ------------------------------------------------------------------ precision=auto: measured, watched


class _CountingModel(ToyModel):
    """The toy model with a buffer that every training forward pass changes (as BatchNorm's running
    statistics would): the probe must put it back."""

    def __init__(self) -> None:
        super().__init__(dropout=0.1)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, *args, **kwargs):
        if self.training:
            self.calls += 1
        return super().forward(*args, **kwargs)


def _scripted(*regimes: tuple[float, float], after: int = 8):
    """A timer for AutoPrecision: runs the pass, and says it took ``fp32`` or ``bf16`` seconds of
    the first regime for the first ``after`` calls (one probe: 2 warm-ups + 2 x 3 timed), then
    of the next regime; records the dtypes it was called with."""
    calls: list[torch.dtype | None] = []

    def timer(run, dtype):
        run(dtype)
        fp32, bf16 = regimes[min(len(calls) // after, len(regimes) - 1)]
        calls.append(dtype)
        return fp32 if dtype is None else bf16

    timer.calls = calls
    return timer


def _auto_run(tmp_path, monkeypatch, timer, steps=6, model=None, precision="auto"):
    from muppets.train import precision as module

    monkeypatch.setattr(module, "cpu_has_native_bf16", lambda: True)
    config = toy_config(steps=steps, precision=precision)
    model = model if model is not None else _CountingModel()
    trainer = Trainer(model, ToyData(config.batch_size, config.accumulation), config, tmp_path)
    if trainer._auto is not None:
        trainer._auto.timer = timer
    result = trainer.train()
    return trainer, model, result


def _records(run_dir):
    from muppets.train import read_log

    return [r for r in read_log(run_dir) if "precision" in r]


def test_auto_probe_choosing_fp32_leaves_the_run_as_fp32(tmp_path, monkeypatch, caplog):
    timer = _scripted((1.0, 1.2))  # bf16 slower (0.83x)
    with caplog.at_level("INFO", logger="muppets.train.trainer"):
        trainer, auto, result = _auto_run(tmp_path / "auto", monkeypatch, timer)
    _, plain, expected = _auto_run(tmp_path / "fp32", monkeypatch, None, precision="fp32")
    assert timer.calls[:2] == [None, torch.bfloat16] and timer.calls.count(torch.bfloat16) == 4
    assert trainer._amp is None and result.losses == expected.losses
    for (name, a), b in zip(auto.state_dict().items(), plain.state_dict().values()):
        assert torch.equal(a, b), name  # weights, and the buffer the probe's 8 passes moved
    assert "precision auto: fp32 (bf16 was 0.83x fp32, under the 1.05x" in caplog.text
    [record] = _records(tmp_path / "auto")
    assert record["step"] == 0 and record["precision"] == "fp32" and record["bf16_speedup"] == pytest.approx(1 / 1.2)


def test_auto_probe_choosing_bf16_trains_as_bf16(tmp_path, monkeypatch, caplog):
    with caplog.at_level("INFO", logger="muppets.train.trainer"):
        trainer, auto, result = _auto_run(tmp_path / "auto", monkeypatch, _scripted((1.0, 0.6)))
    _, plain, expected = _auto_run(tmp_path / "bf16", monkeypatch, None, precision="bf16")
    assert trainer._amp is torch.bfloat16 and result.losses == expected.losses
    for (name, a), b in zip(auto.state_dict().items(), plain.state_dict().values()):
        assert torch.equal(a, b), name
    assert "precision auto: bf16 (bf16 was 1.67x fp32" in caplog.text
    assert [r["precision"] for r in _records(tmp_path / "auto")] == ["bf16"]


def test_explicit_precisions_never_probe(tmp_path, monkeypatch):
    for precision in ("fp32", "bf16"):
        trainer, _, _ = _auto_run(tmp_path / precision, monkeypatch, None, steps=1, precision=precision)
        assert trainer._auto is None and not _records(tmp_path / precision)
    from muppets.train import precision as module

    monkeypatch.setattr(module, "cpu_has_native_bf16", lambda: False)  # emulated bf16: auto is fp32 unmeasured
    trainer = Trainer(ToyModel(), ToyData(8, 2), toy_config(precision="auto"), tmp_path / "emulated")
    assert trainer._auto is None and trainer._amp is None


def test_auto_switches_to_fp32_when_bf16_slows(tmp_path, monkeypatch, caplog):
    # The first probe says bf16 takes 1 ns (2x faster): every real pass then looks far slower than
    # that, so after WATCH_WINDOW steps the watch measures again, and the second probe finds bf16
    # slower than fp32 (the 0.89x state of the issue): the run goes on in fp32.
    from muppets.train.precision import WATCH_WINDOW

    timer = _scripted((2e-9, 1e-9), (1.0, 1 / 0.89))
    with caplog.at_level("INFO", logger="muppets.train.trainer"):
        trainer, _, result = _auto_run(tmp_path, monkeypatch, timer, steps=WATCH_WINDOW + 5)
    assert trainer._amp is None and result.step == WATCH_WINDOW + 5 and len(timer.calls) == 16
    first, second = _records(tmp_path)
    assert (first["step"], first["precision"]) == (0, "bf16")
    assert (second["step"], second["precision"]) == (WATCH_WINDOW, "fp32")
    assert second["bf16_speedup"] == pytest.approx(0.89) and "its probe's time per token" in second["precision_trigger"]
    assert f"precision auto: at step {WATCH_WINDOW}, bf16 took" in caplog.text and "measured again: fp32" in caplog.text


def test_auto_watch_rules():
    from muppets.train.precision import DEGRADED, MAX_RECHECKS, WATCH_WINDOW, AutoPrecision

    auto = AutoPrecision(timer=lambda run, dtype: 1.0 if dtype is None else 0.5)
    assert auto.probe(lambda dtype: None, tokens=100) is torch.bfloat16 and auto.speedup == 2.0
    per_token = 0.5 / 100
    assert not any(auto.observe(per_token * 100 * DEGRADED * 0.99, 100) for _ in range(3 * WATCH_WINDOW))
    slow = per_token * 50 * DEGRADED * 1.01  # fewer tokens per pass, and slower per token
    flags = [auto.observe(slow, 50) for _ in range(WATCH_WINDOW)]
    assert flags.index(True) == WATCH_WINDOW // 2 and auto.rechecks == 1  # once the median has crossed
    assert "1.16x its probe's time per token" in auto.trigger
    for _ in range(MAX_RECHECKS - 1):  # re-probed (bf16 still 2x), slow again: due again, up to the cap
        auto.probe(lambda dtype: None, tokens=100)
        assert [auto.observe(per_token * 100 * 2, 100) for _ in range(WATCH_WINDOW)][-1]
    assert auto.rechecks == MAX_RECHECKS
    auto.probe(lambda dtype: None, tokens=100)
    assert not any(auto.observe(1.0, 1) for _ in range(2 * WATCH_WINDOW))  # no more re-probes
    fp32 = AutoPrecision(timer=lambda run, dtype: 1.0 if dtype is None else 0.97)  # 1.03x: not worth bf16
    assert fp32.probe(lambda dtype: None, tokens=1) is None and not fp32.observe(100.0, 1)


def test_auto_probe_stops_early_when_bf16_is_far_slower():
    from muppets.train.precision import AutoPrecision

    calls = []
    auto = AutoPrecision(timer=lambda run, dtype: calls.append(dtype) or (1.0 if dtype is None else 20.0))
    assert auto.probe(lambda dtype: None, tokens=1) is None and auto.speedup == 0.05
    assert len(calls) == 4 and "median of 1 forward/backward pass each" in auto.reason  # 2 warm-ups + 1 pair
    close = AutoPrecision(timer=lambda run, dtype: calls.append(dtype) or (1.0 if dtype is None else 1.4))
    calls.clear()
    assert close.probe(lambda dtype: None, tokens=1) is None and len(calls) == 8  # not clearly slower: all passes
