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
