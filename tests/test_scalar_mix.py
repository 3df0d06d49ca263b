"""ScalarMix: the mix recomputed in numpy (with and without the masked whole-layer norm), one
layer picked exactly, fixed weights, the readable weights/gamma, gradients, errors, doctests."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
import torch

from muppets.errors import ConfigError
from muppets.nn import scalar_mix as scalar_mix_module
from muppets.nn.scalar_mix import ScalarMix


def _layers(seed: int = 0, K: int = 3, B: int = 2, T: int = 4, H: int = 5) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, T, H, generator=g) * (k + 1) + k for k in range(K)]


def _numpy_mix(layers, logits, gamma, mask=None):
    """γ Σ softmax(w)_k h_k, with h_k normalised by one mean/var over the masked-in entries."""
    w = np.exp(logits - np.max(logits))
    s = w / w.sum()
    out = 0.0
    for k, h in enumerate(layers):
        h = h.numpy().astype(np.float64)
        if mask is not None:
            real = h[mask.numpy()]  # (n, H): the real tokens only
            h = (h - real.mean()) / np.sqrt(real.var() + 1e-12)
        out = out + s[k] * h
    return gamma * out


def test_mix_matches_numpy_with_and_without_masked_layer_norm():
    layers = _layers()
    logits = np.array([0.1, -0.3, 0.7])
    mask = torch.tensor([[True, True, True, False], [True, True, False, False]])
    plain = ScalarMix(3, initial_logits=logits.tolist(), gamma=1.7)
    assert np.allclose(plain(layers).detach().numpy(), _numpy_mix(layers, logits, 1.7), atol=1e-5)
    normed = ScalarMix(3, initial_logits=logits.tolist(), gamma=0.6, layer_norm=True)
    got = normed(layers, mask).detach().numpy()
    assert np.allclose(got, _numpy_mix(layers, logits, 0.6, mask), atol=1e-5)
    # padding does not move the statistics: changing padded entries changes only padded outputs
    moved = [h.clone() for h in layers]
    for h in moved:
        h[~mask] = 1e3
    again = normed(moved, mask).detach().numpy()
    assert np.allclose(again[mask.numpy()], got[mask.numpy()], atol=1e-5)


def test_single_and_fixed_pick_layers_without_magic_logits():
    layers = _layers()
    assert torch.equal(ScalarMix.single(1, 3)(layers), layers[1])
    assert torch.equal(ScalarMix.single(-1, 3)(layers), layers[2])
    assert ScalarMix.single(0, 3).weights() == [1.0, 0.0, 0.0]
    half = ScalarMix.fixed([0.5, 0.0, 0.5], gamma=2.0)
    assert torch.allclose(half(layers), layers[0] + layers[2])
    assert not any(p.requires_grad for p in half.parameters())
    with pytest.raises(ConfigError, match="sum to 1"):
        ScalarMix.fixed([0.5, 0.6])
    with pytest.raises(ConfigError, match="outside"):
        ScalarMix.single(3, 3)
    with pytest.raises(ConfigError, match="initial_logits"):
        ScalarMix(3, initial_logits=[0.0, 1.0])
    with pytest.raises(ValueError, match="3 layers and got 2"):
        ScalarMix(3)(layers[:2])


def test_weights_and_gamma_are_readable_and_trained():
    mix = ScalarMix(3, initial_logits=[0.0, 0.0, float(np.log(2.0))], gamma=1.5)
    assert np.allclose(mix.weights(), [0.25, 0.25, 0.5]) and isinstance(mix.weights()[0], float)
    assert mix.gamma_value() == 1.5
    mix(_layers()).sum().backward()
    assert mix.logits.grad is not None and mix.gamma.grad is not None
    frozen = ScalarMix(3, trainable=False)
    assert not frozen.logits.requires_grad and not frozen.gamma.requires_grad
    assert "fixed" in repr(ScalarMix.single(0, 2)) and "trainable" in repr(mix)


def test_state_dict_round_trip_and_doctests():
    mix = ScalarMix(3, initial_logits=[1.0, 2.0, 3.0], gamma=0.3, layer_norm=True)
    other = ScalarMix(3, layer_norm=True)
    other.load_state_dict(mix.state_dict())
    layers = _layers(1)
    assert torch.equal(other(layers), mix(layers))
    fixed = ScalarMix.fixed([0.2, 0.8])
    again = ScalarMix.fixed([0.5, 0.5])
    again.load_state_dict(fixed.state_dict())
    assert again.weights() == fixed.weights()
    assert doctest.testmod(scalar_mix_module).failed == 0
