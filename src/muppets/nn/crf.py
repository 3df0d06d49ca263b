"""A linear-chain conditional random field over tag sequences (Lafferty et al. 2001), the output
layer of BiLSTM-CRF taggers (Huang et al. 2015; Lample et al. 2016; ELMo's NER model).

For emissions ``e_t(y)`` (a tagger's scores, ``(B, T, C)``) a tag sequence ``y_1 … y_n`` scores

    s(y) = start[y_1] + Σ_{t=1..n} e_t(y_t) + Σ_{t=2..n} A[y_{t−1}, y_t] + end[y_n],

with learned transitions ``A (C, C)`` (from row to column) and start / end scores, and

    p(y | e) = exp s(y) / Z,      log Z = logsumexp over all C^n sequences of s(y).

``log Z`` comes from the forward algorithm in O(n C²): ``α_1 = start + e_1``,
``α_t(j) = logsumexp_i(α_{t−1}(i) + A[i, j]) + e_t(j)``, ``log Z = logsumexp_j(α_n(j) + end[j])``;
the best sequence from Viterbi, the same recursion with max and back-pointers. Sequences are
right-padded: ``mask (B, T)`` is a prefix of True per row, at least one per row.

>>> crf = CRF(2)
>>> e = torch.tensor([[[0.0, 1.0], [2.0, 0.0]]])     # (B=1, T=2, C=2)
>>> crf.decode(e, torch.ones(1, 2, dtype=torch.bool))
[[1, 0]]
"""

from __future__ import annotations

import torch
from torch import nn


class CRF(nn.Module):
    """Transitions ``(C, C)`` and start / end scores ``(C,)``, all starting at 0 (so the first
    updates treat tags as independent, like a softmax layer)."""

    def __init__(self, num_tags: int) -> None:
        super().__init__()
        if num_tags < 1:
            raise ValueError(f"a CRF needs at least one tag, got {num_tags}")
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))  # A[i, j]: score of i -> j
        self.start = nn.Parameter(torch.zeros(num_tags))
        self.end = nn.Parameter(torch.zeros(num_tags))

    def _check(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if emissions.dim() != 3 or emissions.shape[-1] != self.num_tags:
            raise ValueError(f"emissions must be (B, T, {self.num_tags}), got {tuple(emissions.shape)}")
        mask = mask.bool()
        if mask.shape != emissions.shape[:2] or not bool(mask[:, 0].all()):
            raise ValueError("mask must be (B, T) with every row starting with a real position")
        return mask

    def sequence_score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``s(y)`` of the given ``tags (B, T)`` (padding ignored): ``(B,)``."""
        mask = self._check(emissions, mask)
        m = mask.to(emissions.dtype)  # (B, T)
        emit = emissions.gather(2, tags.unsqueeze(-1)).squeeze(-1)  # (B, T)
        trans = self.transitions[tags[:, :-1], tags[:, 1:]]  # (B, T-1)
        last = tags.gather(1, (mask.sum(1, keepdim=True) - 1)).squeeze(1)  # (B,) the last real tag
        return self.start[tags[:, 0]] + (emit * m).sum(1) + (trans * m[:, 1:]).sum(1) + self.end[last]

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``log Z`` by the forward algorithm: ``(B,)``."""
        mask = self._check(emissions, mask)
        alpha = self.start + emissions[:, 0]  # (B, C)
        for t in range(1, emissions.shape[1]):
            step = torch.logsumexp(alpha.unsqueeze(2) + self.transitions, dim=1) + emissions[:, t]  # (B, C)
            alpha = torch.where(mask[:, t, None], step, alpha)
        return torch.logsumexp(alpha + self.end, dim=1)

    def neg_log_likelihood(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``−log p(y | e) = log Z − s(y)`` per sequence: ``(B,)``."""
        return self.log_partition(emissions, mask) - self.sequence_score(emissions, tags, mask)

    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """The highest-scoring tag sequence of each row (Viterbi), as lists of its real length."""
        mask = self._check(emissions, mask)
        score = self.start + emissions[:, 0]  # (B, C)
        pointers = []
        for t in range(1, emissions.shape[1]):
            best, arg = (score.unsqueeze(2) + self.transitions).max(dim=1)  # (B, C) each
            pointers.append(arg)
            score = torch.where(mask[:, t, None], best + emissions[:, t], score)
        score = score + self.end
        lengths = mask.sum(1).tolist()
        paths = []
        for b, n in enumerate(lengths):
            tag = int(score[b].argmax())
            path = [tag]
            for t in range(n - 1, 0, -1):  # pointers[t - 1] maps the tag at t to the best at t - 1
                tag = int(pointers[t - 1][b, tag])
                path.append(tag)
            paths.append(path[::-1])
        return paths
