"""The BERT pooler: the sentence vector NSP and sentence-level heads read."""

from __future__ import annotations

import torch
from torch import nn


class Pooler(nn.Module):
    """``tanh(W · h_0 + b)`` from the first (``[CLS]``) position; ``(B, T, H) -> (B, H)``."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))
