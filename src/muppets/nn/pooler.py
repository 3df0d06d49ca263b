"""The BERT pooler: the sentence vector NSP and sentence-level heads read."""

from __future__ import annotations

import torch
from torch import nn

from muppets.nn.feedforward import activation


class Pooler(nn.Module):
    """``act(W · h_0 + b)`` from the first (``[CLS]``) position; ``(B, T, H) -> (B, H)``.

    ``act`` is BERT's ``tanh`` (and RoBERTa's classifier's); the sentence heads of transformers'
    DistilBERT use ``relu`` and ELECTRA's ``gelu`` at the same place (see :mod:`muppets.families`).
    """

    def __init__(self, hidden_size: int, act: str = "tanh") -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.act_name = act  # what a model of another width built like this one uses (distillation students)
        self.act = torch.tanh if act == "tanh" else activation(act)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(hidden[:, 0]))
