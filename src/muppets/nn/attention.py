"""Multi-head self-attention on top of ``torch.nn.functional.scaled_dot_product_attention``."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from muppets.nn.decode import linear
from muppets.nn.dropout import dropout as fast_dropout
from muppets.nn.dropout import is_suppressed as dropout_suppressed
from muppets.nn.kv_cache import LayerCache
from muppets.nn.packing import Packing


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused QKV projection (Vaswani et al. 2017, §3.2).

    Args:
        hidden_size: model width ``H``.
        num_heads: number of heads; ``H`` must be divisible by it.
        dropout: dropout on the attention probabilities (training only).
        causal: mask future positions (GPT) instead of / in addition to padding.

    ``record`` is None except while :func:`muppets.analysis.attention.capture_attention` runs:
    then the probabilities are computed explicitly and handed to it (``(B, heads, T, S)``, before
    dropout); otherwise the forward never leaves SDPA's fused path.
    """

    record: Callable[[torch.Tensor], None] | None = None
    record_grad = False  # True: :attr:`record` gets the probabilities with their graph (distillation's attention loss)

    def __init__(self, hidden_size: int, num_heads: int, dropout: float = 0.0, causal: bool = False) -> None:
        super().__init__()
        assert hidden_size % num_heads == 0, "hidden_size must be divisible by num_heads"
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.dropout = dropout
        self.causal = causal
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)  # rows: [q; k; v]
        self.out = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                cache: LayerCache | None = None, packing: Packing | None = None) -> torch.Tensor:
        """x: ``(B, T, H)`` -> ``(B, T, H)``; with ``packing``, x is the real tokens ``(N, H)``
        -> ``(N, H)`` (the projections run on them only; see :mod:`muppets.nn.packing`).

        attn_mask: bool, True = may attend. Without a cache ``(B, 1, 1, T)`` padding (the causal
        part is added here); with a ``cache`` the full ``(B, 1, T, S)`` mask over the ``S``
        cached + new keys (see :meth:`muppets.nn.kv_cache.KVCache.advance`), or None.
        """
        if packing is not None:
            qkv = packing.unpack(linear(self.qkv, x))  # (N, 3H) -> (B, T, 3H)
            B, T, H = qkv.shape[0], qkv.shape[1], x.shape[-1]
        else:
            B, T, H = x.shape
            qkv = linear(self.qkv, x)  # (B, T, 3H)
        qkv = qkv.view(B, T, 3, self.num_heads, self.head_dim)  # (B, T, 3, heads, hd)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, heads, T, hd)
        if self.record is not None:
            y = self._attend_and_record(q, k, v, attn_mask, cache)
        elif cache is not None:
            k, v = cache.append(k, v)  # (B, heads, S, hd)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        elif self.training and self.dropout > 0.0 and q.device.type == "cpu":
            y = _attention_with_dropout(q, k, v, attn_mask, self.dropout, self.causal)
        else:
            y = F.scaled_dot_product_attention(  # on a GPU, training dropout too: its fused kernels
                q, k, v, attn_mask=_merge_causal(attn_mask, T, self.causal),  # draw the mask inside
                dropout_p=self.dropout if self.training and not dropout_suppressed() else 0.0,
                is_causal=self.causal and attn_mask is None,
            )  # (B, heads, T, hd)
        y = y.transpose(1, 2).reshape(B, T, H)  # (B, T, H)
        if packing is not None:
            y = packing.pack(y)  # (N, H)
        return linear(self.out, y)

    def _attend_and_record(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           attn_mask: torch.Tensor | None, cache: LayerCache | None) -> torch.Tensor:
        """The same attention as :meth:`forward`'s SDPA calls, with the probabilities
        ``(B, heads, T, S)`` passed to :attr:`record` first. q, k, v: ``(B, heads, T, hd)``."""
        if cache is not None:
            k, v = cache.append(k, v)  # (B, heads, S, hd); the mask already covers causality
            mask = attn_mask
        else:
            T = q.shape[2]
            mask = _merge_causal(attn_mask, T, self.causal)
            if mask is None and self.causal:
                mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        probs = attention_probs(q, k, mask)  # (B, heads, T, S)
        self.record(probs if self.record_grad else probs.detach())
        return fast_dropout(probs, self.dropout, self.training) @ v  # (B, heads, T, hd)


def attention_probs(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) with masked keys (``mask`` False) at zero probability.

    q: ``(B, heads, T, hd)``, k: ``(B, heads, S, hd)``, mask: bool broadcastable to
    ``(B, heads, T, S)`` or None -> ``(B, heads, T, S)``. A row with no visible key is all
    zeros, not NaN.
    """
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5  # (B, heads, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)


def _merge_causal(attn_mask: torch.Tensor | None, T: int, causal: bool) -> torch.Tensor | None:
    """Combine a padding mask ``(B, 1, 1, T)`` with the causal mask when both apply."""
    if not causal or attn_mask is None:
        return attn_mask
    tril = torch.ones(T, T, dtype=torch.bool, device=attn_mask.device).tril()
    return attn_mask & tril  # (B, 1, T, T)


def _attention_with_dropout(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    attn_mask: torch.Tensor | None, p: float, causal: bool,
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + mask) with dropout on the probabilities, then @ v.

    The same computation SDPA's math path does in training, but with :mod:`muppets.nn.dropout`'s
    cheaper mask, and the scale and mask folded into one ``baddbmm``.
    q, k, v: ``(B, heads, T, hd)`` -> ``(B, heads, T, hd)``.
    """
    B, heads, T, hd = q.shape
    mask = _merge_causal(attn_mask, T, causal)
    if mask is None and causal:
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    if mask is None:
        bias = q.new_zeros(1, 1, 1)
    else:  # additive mask, broadcast over heads: (B*heads, 1 or T, T)
        bias = q.new_zeros(mask.shape).masked_fill_(~mask, float("-inf"))
        bias = bias.expand(B, heads, *bias.shape[-2:]).reshape(B * heads, *bias.shape[-2:])
    scores = torch.baddbmm(bias, q.reshape(B * heads, T, hd), k.reshape(B * heads, T, hd).transpose(1, 2),
                           alpha=hd ** -0.5)  # (B*heads, T, T)
    probs = fast_dropout(torch.softmax(scores, dim=-1), p, True)
    return (probs @ v.reshape(B * heads, T, hd)).view(B, heads, T, hd)
