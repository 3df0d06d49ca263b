"""The structural probe (Hewitt & Manning 2019): is a parse tree a linear map away?

A rank-``k`` map ``B (k × D)`` is trained so that the squared distance

    d_B(h_i, h_j)² = ||B (h_i − h_j)||²

approximates the tree distance ``d_T(i, j)`` (edges on the path between words ``i`` and ``j``
of the gold dependency tree), with the paper's L1 loss normalised by the squared length of
each sentence ``s`` (§2, their eq. 3)::

    loss = mean over sentences of  (1 / |s|²) Σ_{i,j} | d_T(i, j) − d_B(h_i, h_j)² |

Evaluation (§3.1), on each sentence's predicted distance matrix:

* **UUAS** — the minimum spanning tree of the predicted distances against the gold tree's
  undirected edges, both over the non-punctuation words only (as the paper's code: punctuation
  is dropped from both graphs, edges are chosen by Kruskal's algorithm from the smallest
  distance up); for English EWT punctuation is UPOS ``PUNCT``, UD's equivalent of the PTB tags
  the paper skips. UUAS = correct edges / gold edges, summed over the sentences.
* **DSpr.** — per word, Spearman's ρ between its row of predicted and of gold distances;
  averaged within each sentence length from 5 to 50, then over those lengths.

>>> tree_distances([2, 0, 2]).tolist()
[[0, 1, 2], [1, 0, 1], [2, 1, 0]]
>>> sorted(mst_edges(tree_distances([2, 0, 2]).astype(float)))
[(0, 1), (1, 2)]
"""

from __future__ import annotations

import logging
from collections import defaultdict, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from muppets.errors import ConfigError
from muppets.metrics import spearman

log = logging.getLogger(__name__)

DSPR_LENGTHS = (5, 50)  # sentence lengths DSpr. averages over (inclusive), as the paper
PUNCT_UPOS = "PUNCT"


# ----------------------------------------------------------------------------- trees and metrics


def tree_distances(heads: Sequence[int]) -> np.ndarray:
    """``(n, n)`` path lengths in the tree given by 1-based ``heads`` (0 = root), by a
    breadth-first search from every word."""
    n = len(heads)
    neighbours: list[list[int]] = [[] for _ in range(n)]
    for child, head in enumerate(heads):
        if head:
            neighbours[child].append(head - 1)
            neighbours[head - 1].append(child)
    out = np.full((n, n), -1, dtype=np.int64)
    for start in range(n):
        out[start, start] = 0
        queue = deque([start])
        while queue:
            word = queue.popleft()
            for nxt in neighbours[word]:
                if out[start, nxt] < 0:
                    out[start, nxt] = out[start, word] + 1
                    queue.append(nxt)
    if (out < 0).any():
        raise ConfigError(f"heads {list(heads)} do not form one tree")
    return out


def _find(parent: list[int], i: int) -> int:
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def mst_edges(distances: np.ndarray, skip: Sequence[bool] | None = None) -> set[tuple[int, int]]:
    """Undirected edges ``(i, j)``, ``i < j``, of the minimum spanning tree of the words not in
    ``skip`` under ``distances (n, n)`` (Kruskal; ties go to the earlier pair ``(i, j)``)."""
    n = len(distances)
    keep = [i for i in range(n) if not (skip is not None and skip[i])]
    pairs = sorted(((float(distances[i, j]), i, j) for a, i in enumerate(keep) for j in keep[a + 1:]))
    parent = list(range(n))
    edges = set()
    for _, i, j in pairs:
        ri, rj = _find(parent, i), _find(parent, j)
        if ri != rj:
            parent[ri] = rj
            edges.add((i, j))
    return edges


def uuas_counts(predicted: np.ndarray, gold: np.ndarray, punct: Sequence[bool]) -> tuple[int, int]:
    """``(correct, gold edges)`` of one sentence: MST of ``predicted`` vs MST of ``gold``
    distances, punctuation left out of both."""
    gold_edges = mst_edges(gold, punct)
    return len(mst_edges(predicted, punct) & gold_edges), len(gold_edges)


def distance_spearman(predicted: Sequence[np.ndarray], gold: Sequence[np.ndarray],
                      lengths: tuple[int, int] = DSPR_LENGTHS) -> float:
    """DSpr.: per word, ρ(predicted row, gold row); mean per sentence length in ``lengths``
    (inclusive), then the mean over those lengths (NaN if no sentence has such a length)."""
    by_length: dict[int, list[float]] = defaultdict(list)
    for p, g in zip(predicted, gold):
        n = len(g)
        if lengths[0] <= n <= lengths[1]:
            by_length[n].extend(spearman(p[i], g[i]) for i in range(n))
    if not by_length:
        return float("nan")
    return float(np.mean([np.mean(v) for v in by_length.values()]))


# ----------------------------------------------------------------------------- the probe


class StructuralProbe(nn.Module):
    """``h (B, T, D)`` -> squared distances ``||B(h_i − h_j)||² (B, T, T)``; ``B`` is stored as
    ``proj (D, k)`` and starts at U(−0.05, 0.05) as the paper's code."""

    def __init__(self, dim: int, rank: int) -> None:
        super().__init__()
        if rank < 1:
            raise ConfigError(f"structural probe rank {rank} must be >= 1")
        self.proj = nn.Parameter(torch.empty(dim, rank).uniform_(-0.05, 0.05))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        t = h @ self.proj  # (B, T, k)
        sq = (t * t).sum(-1)  # (B, T)
        gram = t @ t.transpose(1, 2)  # (B, T, T)
        return (sq[:, :, None] + sq[:, None, :] - 2.0 * gram).clamp_min(0.0)  # (B, T, T)


def structural_loss(predicted: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Mean over sentences of ``Σ_{i,j<n} |gold − predicted| / n²``; ``predicted``, ``gold``
    ``(B, T, T)``, ``lengths (B,)``."""
    T = predicted.shape[1]
    valid = torch.arange(T)[None, :] < lengths[:, None]  # (B, T)
    pairs = (valid[:, :, None] & valid[:, None, :]).to(predicted.dtype)  # (B, T, T)
    per_sentence = ((gold - predicted).abs() * pairs).sum((1, 2)) / lengths.to(predicted.dtype) ** 2
    return per_sentence.mean()


@dataclass
class TreeBatch:
    """Sentences of similar length: word rows ``index (B, T)`` into a split's word axis (0 at
    padding), gold distances ``(B, T, T)`` and ``lengths (B,)``; ``ids`` are the sentences."""

    ids: list[int]
    index: torch.Tensor
    gold: torch.Tensor
    lengths: torch.Tensor


def tree_batches(offsets: np.ndarray, distances: Sequence[np.ndarray], batch_size: int) -> list[TreeBatch]:
    """Length-sorted batches of ``batch_size`` sentences (``offsets (S + 1,)``: word starts)."""
    order = sorted(range(len(distances)), key=lambda s: len(distances[s]))
    out = []
    for start in range(0, len(order), batch_size):
        ids = order[start: start + batch_size]
        T = max(len(distances[s]) for s in ids)
        index = torch.zeros(len(ids), T, dtype=torch.long)
        gold = torch.zeros(len(ids), T, T)
        for b, s in enumerate(ids):
            n = len(distances[s])
            index[b, :n] = torch.arange(int(offsets[s]), int(offsets[s]) + n)
            gold[b, :n, :n] = torch.from_numpy(distances[s].astype(np.float32))
        out.append(TreeBatch(ids, index, gold, torch.tensor([len(distances[s]) for s in ids])))
    return out


def shuffled(batches: Sequence[TreeBatch], generator: torch.Generator) -> Iterator[TreeBatch]:
    for i in torch.randperm(len(batches), generator=generator).tolist():
        yield batches[i]
