"""ScalarMix: a task-weighted sum of a backbone's layers (ELMo, Peters et al. 2018, eq. 1).

    s = softmax(w),        mix = γ · Σ_k s_k · h_k

over the ``K`` layers ``h_k (B, T, H)`` of an :class:`~muppets.nn.encoded.Encoded`. ``w`` (K
logits) and ``γ`` (a scalar) are learned with the task; ELMo found ``γ`` important for
optimisation because the biLM's layers and the task's inputs differ in scale (§3.2).

With ``layer_norm=True`` each ``h_k`` is first normalised as ELMo/AllenNLP do it — one mean
and one variance per layer, taken over every real (masked-in) token and every feature of the
batch, not per token::

    μ_k = Σ_{b,t: m=1, d} h_k / (n · H),   σ²_k = Σ_{b,t: m=1, d} (h_k − μ_k)² / (n · H)
    ĥ_k = (h_k − μ_k) / sqrt(σ²_k + ε),    n = Σ m

(so a layer's statistics depend on the other sentences of the batch, as in the original).

Reading and choosing the mix is plain: :meth:`ScalarMix.weights` returns ``s`` as a list and
:meth:`ScalarMix.gamma_value` the scale; :meth:`ScalarMix.fixed` takes ``s`` as given (no softmax, nothing
trained) and :meth:`ScalarMix.single` picks one layer — no near-infinite logits needed.

>>> import torch
>>> layers = [torch.full((1, 2, 3), float(k)) for k in range(3)]
>>> ScalarMix.single(2, 3)(layers)[0, 0].tolist()
[2.0, 2.0, 2.0]
>>> ScalarMix(3).weights()
[0.3333333432674408, 0.3333333432674408, 0.3333333432674408]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from muppets.errors import ConfigError

LAYER_NORM_EPS = 1e-12  # AllenNLP's epsilon for the whole-layer normalisation


class ScalarMix(nn.Module):
    """``γ · Σ_k softmax(w)_k · h_k`` over ``num_layers`` layers (see the module docstring).

    Args:
        num_layers: ``K``, the number of layers mixed (an ``Encoded`` has ``L + 1``).
        layer_norm: normalise every layer (masked, whole-layer statistics) before mixing.
        initial_logits: starting ``w`` (default zeros: the uniform average).
        gamma: starting ``γ``.
        trainable: learn ``w`` and ``γ`` (False keeps them fixed).
    """

    def __init__(self, num_layers: int, *, layer_norm: bool = False,
                 initial_logits: Sequence[float] | None = None, gamma: float = 1.0,
                 trainable: bool = True) -> None:
        super().__init__()
        if num_layers < 1:
            raise ConfigError(f"ScalarMix needs at least one layer, got num_layers={num_layers}")
        logits = [0.0] * num_layers if initial_logits is None else [float(v) for v in initial_logits]
        if len(logits) != num_layers:
            raise ConfigError(f"initial_logits has {len(logits)} values for num_layers={num_layers}")
        self.num_layers, self.layer_norm = num_layers, layer_norm
        self.logits = nn.Parameter(torch.tensor(logits), requires_grad=trainable)  # (K,)
        self.gamma = nn.Parameter(torch.tensor(float(gamma)), requires_grad=trainable)
        self.register_buffer("fixed_weights", torch.empty(0))  # (K,) when set by fixed()/single()

    @classmethod
    def fixed(cls, weights: Sequence[float], *, gamma: float = 1.0, layer_norm: bool = False) -> ScalarMix:
        """A mix with the given normalised weights ``s`` (each ≥ 0, summing to 1), used as is;
        nothing is trained."""
        s = torch.tensor([float(v) for v in weights])
        if len(s) == 0 or bool((s < 0).any()) or abs(float(s.sum()) - 1.0) > 1e-6:
            raise ConfigError(f"fixed mix weights {list(weights)} must be >= 0 and sum to 1")
        mix = cls(len(s), layer_norm=layer_norm, gamma=gamma, trainable=False)
        mix.fixed_weights = s
        return mix

    @classmethod
    def single(cls, k: int, num_layers: int, *, gamma: float = 1.0) -> ScalarMix:
        """Layer ``k`` alone (negative ``k`` counts from the top: -1 is the last layer)."""
        if not -num_layers <= k < num_layers:
            raise ConfigError(f"layer {k} is outside the {num_layers} layers")
        onehot = [0.0] * num_layers
        onehot[k % num_layers] = 1.0
        return cls.fixed(onehot, gamma=gamma)

    def normalized(self) -> torch.Tensor:
        """``s`` as a ``(K,)`` tensor (differentiable when trainable)."""
        if self.fixed_weights.numel():
            return self.fixed_weights
        return torch.softmax(self.logits, dim=0)

    def weights(self) -> list[float]:
        """``s = softmax(w)`` (or the fixed weights) as plain floats."""
        return [float(v) for v in self.normalized().detach()]

    def gamma_value(self) -> float:
        """``γ`` as a plain float (the parameter itself is ``self.gamma``)."""
        return float(self.gamma.detach())

    def forward(self, layers: Sequence[torch.Tensor], mask: torch.Tensor | None = None) -> torch.Tensor:
        """``K`` tensors ``(B, T, H)`` (+ ``mask (B, T)``, used by the layer norm) -> ``(B, T, H)``."""
        if len(layers) != self.num_layers:
            raise ValueError(f"ScalarMix was built for {self.num_layers} layers and got {len(layers)}")
        if self.layer_norm:
            m = torch.ones(layers[0].shape[:-1], dtype=torch.bool, device=layers[0].device) if mask is None else mask
            layers = [masked_layer_norm(h, m) for h in layers]
        s = self.normalized().to(layers[0].dtype)
        out = s[0] * layers[0]
        for k in range(1, self.num_layers):
            out = out + s[k] * layers[k]
        return self.gamma.to(out.dtype) * out

    def extra_repr(self) -> str:
        kind = "fixed" if self.fixed_weights.numel() else "trainable" if self.logits.requires_grad else "frozen"
        return f"num_layers={self.num_layers}, layer_norm={self.layer_norm}, {kind}"


def masked_layer_norm(h: torch.Tensor, mask: torch.Tensor, eps: float = LAYER_NORM_EPS) -> torch.Tensor:
    """``(h − μ) / sqrt(σ² + eps)`` with one ``μ``, ``σ²`` over the real tokens of ``h (B, T, H)``."""
    m = mask.to(h.dtype).unsqueeze(-1)  # (B, T, 1)
    n = (m.sum() * h.shape[-1]).clamp_min(1.0)
    mean = (h * m).sum() / n
    var = (((h - mean) * m) ** 2).sum() / n
    return (h - mean) / torch.sqrt(var + eps)
