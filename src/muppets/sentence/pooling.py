"""Pooling: token vectors -> one sentence vector (Reimers & Gurevych 2019, §3).

Over the real tokens (special tokens included, padding excluded; right padding) of the top
layer ``h (B, T, H)`` with mask ``m (B, T)``, as sentence-transformers' ``Pooling`` computes:

- ``cls``: ``h_0``; ``last``: the last real token (``lasttoken``);
- ``mean``: ``sum_t m_t h_t / sum_t m_t``; ``mean_sqrt_len``: divided by ``sqrt(sum_t m_t)`` instead;
- ``weighted_mean``: positions weighted ``1 … T`` (later tokens count more, SGPT's weighting):
  ``sum_t t m_t h_t / sum_t t m_t``;
- ``max``: the elementwise max over real tokens.

Several modes are concatenated in the order given (``(B, len(modes) * H)``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from muppets.errors import ConfigError
from muppets.sentence.names import LEGACY_KEYS, MODES, ST_NAMES  # noqa: F401  (re-exported)

# muppets' name -> sentence-transformers' name (``pooling_mode`` values; legacy keys add ``pooling_mode_…``)
def pool_one(hidden: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """``hidden (B, T, H)``, ``mask (B, T)`` (1 = real token, right padding) -> ``(B, H)``.

    >>> h = torch.tensor([[[1.0, 0.0], [3.0, 4.0], [9.0, 9.0]]])
    >>> m = torch.tensor([[1, 1, 0]])
    >>> pool_one(h, m, "mean").tolist(), (3 * pool_one(h, m, "weighted_mean")).round().tolist()
    ([[2.0, 2.0]], [[7.0, 8.0]])
    >>> pool_one(h, m, "last").tolist(), pool_one(h, m, "max").tolist()
    ([[3.0, 4.0]], [[3.0, 4.0]])
    """
    m = mask.to(hidden.dtype)[..., None]  # (B, T, 1)
    count = m.sum(1).clamp_min(1e-9)  # (B, 1)
    if mode == "cls":
        return hidden[:, 0]
    if mode in ("mean", "mean_sqrt_len"):
        total = (hidden * m).sum(1)  # (B, H)
        return total / (count if mode == "mean" else count.sqrt())
    if mode == "weighted_mean":
        w = m * torch.arange(1, hidden.shape[1] + 1, dtype=hidden.dtype)[None, :, None]  # (B, T, 1)
        return (hidden * w).sum(1) / w.sum(1).clamp_min(1e-9)
    if mode == "max":
        return hidden.masked_fill(m == 0, float("-inf")).max(1).values
    if mode == "last":
        last = mask.long().sum(1) - 1  # (B,)
        return hidden[torch.arange(hidden.shape[0]), last.clamp_min(0)]
    raise ConfigError(f"pooling {mode!r} is not one of {', '.join(MODES)}")


def pool(hidden: torch.Tensor, mask: torch.Tensor, modes: Sequence[str]) -> torch.Tensor:
    """Every mode of ``modes`` concatenated: ``(B, T, H)`` -> ``(B, len(modes) * H)``."""
    return torch.cat([pool_one(hidden, mask, mode) for mode in modes], dim=-1)
