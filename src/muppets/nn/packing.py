"""Unpadded ("packed") batches: the token-wise parts of a transformer skip the padding.

A batch of sentences of different lengths is padded to ``(B, T)``; every linear layer,
LayerNorm and feed-forward then also computes the padding rows, which are thrown away. With
short, uneven inputs (a served batch of whatever requests arrived together) that can be a third
of the work or more. :class:`Packing` keeps only the real tokens, ``(N, H)`` with
``N = mask.sum()``, for the token-wise layers, and scatters them back to ``(B, T, ·)`` only for
the attention itself, whose cost is quadratic in T anyway and which needs the rows aligned.
The result at real positions equals the padded computation up to float rounding; padding
positions come back as zeros.

Data-dependent shapes (``N``) do not trace to ONNX, so packing is an inference option
(:meth:`muppets.models.bert.BertBackbone.forward` ``unpad=True``), never the default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Packing:
    """Where the real tokens of a padded ``(B, T)`` batch are."""

    index: torch.Tensor  # (N,) long: flat positions b * T + t of the real tokens, in order
    batch: int  # B
    length: int  # T

    @classmethod
    def from_mask(cls, mask: torch.Tensor) -> "Packing":
        """mask: ``(B, T)``, nonzero / True at real tokens."""
        B, T = mask.shape
        return cls(mask.reshape(-1).nonzero().squeeze(1), B, T)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, *rest) -> (N, *rest)``: the real tokens only."""
        return x.reshape(self.batch * self.length, *x.shape[2:]).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, *rest) -> (B, T, *rest)``, zeros at the padding."""
        out = x.new_zeros(self.batch * self.length, *x.shape[1:])
        out.index_copy_(0, self.index, x)
        return out.view(self.batch, self.length, *x.shape[1:])
