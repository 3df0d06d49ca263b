"""Highway layers (Srivastava et al. 2015), as ELMo's token encoder stacks them after the char CNN.

One layer computes, element-wise,

    y = g ⊙ x + (1 − g) ⊙ relu(W_h x + b_h),        g = σ(W_g x + b_g)

so ``g`` is the *carry* gate: ``g = 1`` passes the input through unchanged. Gate-bias
conventions differ by which gate is parameterised, and all of them start the layer close to
the identity:

* Srivastava et al. (2015) and Kim et al. (2016) parameterise the *transform* gate
  ``t = σ(W_t x + b_t)`` (``y = t ⊙ f(x) + (1 − t) ⊙ x``) and initialise ``b_t`` negative
  (−1 … −3; Kim: −2).
* bilm-tf (the original ELMo code) names its gate ``carry_gate`` but multiplies it with the
  transform branch, so it too is a transform gate, with bias −2.
* AllenNLP parameterises the carry gate, as here, and fills its bias with **+1**.

Since ``σ(−z) = 1 − σ(z)``, a transform-gate bias of ``−b`` equals a carry-gate bias of ``+b``
here. The default ``carry_bias=1.0`` follows AllenNLP; ``2.0`` reproduces bilm-tf/Kim.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class Highway(nn.Module):
    """``num_layers`` highway layers of width ``dim``: ``(..., dim) -> (..., dim)``.

    Each layer holds one ``Linear(dim, 2·dim)``: the first half of its output is the transform
    branch ``W_h x + b_h``, the second half the carry-gate logits ``W_g x + b_g``.

    Args:
        dim: the input and output width.
        num_layers: layers applied one after the other.
        carry_bias: initial ``b_g`` (positive = start near the identity; see the module doc).
    """

    def __init__(self, dim: int, num_layers: int = 2, carry_bias: float = 1.0) -> None:
        super().__init__()
        self.dim, self.carry_bias = dim, carry_bias
        self.layers = nn.ModuleList(nn.Linear(dim, 2 * dim) for _ in range(num_layers))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weights ~ N(0, 1/dim) (bilm-tf's choice), transform bias 0, carry bias ``carry_bias``."""
        for layer in self.layers:
            nn.init.normal_(layer.weight, 0.0, 1.0 / math.sqrt(self.dim))
            with torch.no_grad():
                layer.bias[: self.dim].zero_()
                layer.bias[self.dim:].fill_(self.carry_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x (..., dim)`` -> ``(..., dim)``."""
        for layer in self.layers:
            transform, gate_logits = layer(x).chunk(2, dim=-1)  # (..., dim) each
            gate = torch.sigmoid(gate_logits)
            x = gate * x + (1.0 - gate) * F.relu(transform)
        return x
