"""Device choice and host -> device copies (muppets.train.device), checked without a GPU: CUDA's
presence is faked where the decision is what is tested, and the copies are recorded."""

from __future__ import annotations

import pytest
import torch

from muppets.errors import ConfigError
from muppets.nn.attention import SelfAttention
from muppets.train import device as dev
from muppets.train.precision import autocast


def _fake_cuda(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_auto_is_this_ranks_gpu_or_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch, 4)
    assert dev.pick_device("auto", 3) == torch.device("cuda", 3)
    assert dev.pick_device("cuda", 2) == torch.device("cuda", 2)  # plain cuda: this rank's GPU, not cuda:0
    assert dev.pick_device("cuda:1", 2) == torch.device("cuda", 1)  # an explicit index is honoured
    _fake_cuda(monkeypatch, 0)
    assert dev.pick_device("auto", 3) == torch.device("cpu")
    assert dev.pick_device("cpu", 3) == torch.device("cpu")


def test_cuda_asked_for_where_there_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch, 0)
    with pytest.raises(ConfigError, match="CUDA is not available"):
        dev.pick_device("cuda:0")
    _fake_cuda(monkeypatch, 2)
    with pytest.raises(ConfigError, match="GPU 2 asked for, 2 visible"):
        dev.pick_device("cuda:2")
    with pytest.raises(ConfigError, match="not a device name"):
        dev.pick_device("gpu0")


class _Recorded(torch.Tensor):
    """A CPU tensor that records how it is pinned and copied (no GPU is touched)."""

    calls: list[tuple] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.pin_memory:
            cls.calls.append(("pin",))
            return args[0]
        if func is torch.Tensor.to:
            cls.calls.append(("to", str(args[1]), kwargs.get("non_blocking", False)))
            return args[0]
        return super().__torch_function__(func, types, args, kwargs)


def test_to_device_pins_and_does_not_block_only_for_a_gpu() -> None:
    batch = {"input_ids": torch.ones(2, 3, dtype=torch.long).as_subclass(_Recorded), "flag": True}
    _Recorded.calls = []
    out = dev.to_device(batch, torch.device("cuda", 0))
    assert _Recorded.calls == [("pin",), ("to", "cuda:0", True)] and out["flag"] is True
    _Recorded.calls = []
    out = dev.to_device(batch, torch.device("cpu"))
    assert _Recorded.calls == [] and out["input_ids"] is batch["input_ids"]  # the CPU path is untouched


def test_autocast_follows_the_device() -> None:
    with autocast(torch.device("cpu"), torch.bfloat16):
        assert torch.is_autocast_enabled("cpu") and not torch.is_autocast_enabled("cuda")
    assert isinstance(autocast(torch.device("cuda", 0), torch.bfloat16), torch.autocast)
    assert autocast(torch.device("cuda", 0), torch.bfloat16).device == "cuda"


def test_training_attention_off_the_cpu_hands_dropout_to_sdpa(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU training dropout runs inside SDPA's fused kernels (dropout_p), not on a
    materialised score matrix; on the CPU the explicit path stays. The device type is faked."""
    seen: list[float] = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
        seen.append(dropout_p)
        return real(q, k, v, attn_mask=attn_mask, is_causal=is_causal)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    attention = SelfAttention(8, 2, dropout=0.25, causal=True).train()
    x = torch.randn(2, 5, 8)
    attention(x)
    assert seen == []  # CPU: the explicit dropout path
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda", 0)))
    attention(x)
    attention.eval()(x)
    assert seen == [0.25, 0.0]
