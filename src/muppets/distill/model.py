"""The student under the Trainer's contract, and the batches it learns from.

:class:`DistillData` is fine-tuning's :class:`~muppets.transfer.batching.EpochData` (the same
length-bucketed, resumable epochs) whose batches also carry the teacher's logits for every
feature, computed once before training (the teacher is in eval mode, so they are the same in
every epoch), gold labels where they exist (``-100`` / NaN elsewhere) and, for token-level
kinds, which positions the soft targets cover.

:class:`DistillModel` runs the student and returns each loss term of
:mod:`~muppets.distill.losses` as a sum with its weight applied; with intermediate losses the
teacher runs beside it on the same batch (no gradients). The teacher is held outside the
module's parameters: checkpoints hold the student (and the hidden-state projections), and only
they are trained.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from muppets.distill import losses
from muppets.heads import TaskModel
from muppets.nn.attention import SelfAttention
from muppets.transfer.batching import EpochData, collate
from muppets.transfer.features import Feature

_TOKEN_LEVEL = ("tag", "span")


@dataclass
class DistillOutput:
    loss_sums: dict[str, torch.Tensor]  # weighted sums per term: soft, gold, hidden, attention (those in use)
    logits: torch.Tensor


@dataclass(frozen=True)
class Weights:
    """Which terms are on and their weights."""

    alpha: float  # soft; gold gets 1 - alpha
    hidden: float = 0.0
    attention: float = 0.0
    temperature: float = 2.0
    soft_loss: str = "kl"

    @property
    def terms(self) -> list[str]:
        names = [("soft", self.alpha > 0), ("gold", self.alpha < 1), ("hidden", self.hidden > 0),
                 ("attention", self.attention > 0)]
        return [n for n, on in names if on]


class DistillData(EpochData):
    """:class:`EpochData` whose batches add ``teacher_logits`` (and ``soft_mask`` for tag / span)."""

    def __init__(self, features: Sequence[Feature], teacher_logits: Sequence[np.ndarray] | None, weights: Weights,
                 kind: str, batch_size: int, accumulation: int, epochs: int, seed: int, pad_id: int,
                 bucket_batches: int = 0) -> None:
        super().__init__(features, kind, batch_size, accumulation, epochs, seed, pad_id, bucket_batches=bucket_batches)
        self.teacher_logits, self.weights = teacher_logits, weights

    def collate(self, indices: list[int]) -> dict[str, torch.Tensor]:
        feats = [self.features[i] for i in indices]
        batch = collate(feats, self.pad_id)
        batch.pop("labels", None)
        T = batch["input_ids"].shape[-1]
        batch["labels"] = gold_labels(self.kind, feats, T)
        if self.teacher_logits is not None:
            batch["teacher_logits"] = padded_logits([self.teacher_logits[i] for i in indices], self.kind, T)
        if self.kind == "tag":
            batch["soft_mask"] = word_mask(feats, T)
        elif self.kind == "span":
            batch["soft_mask"] = batch["attention_mask"].bool()
        return batch

    def normalizers(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        units: dict[str, float] = {}
        rows = float(batch["input_ids"].shape[0])
        tokens = float(batch["attention_mask"].sum())
        for term in self.weights.terms:
            if term == "soft":
                units[term] = float(batch["soft_mask"].sum()) if self.kind == "tag" else rows
            elif term == "gold":
                units[term] = losses.gold_units(self.kind, batch["labels"])
            else:
                units[term] = tokens
        return units


def gold_labels(kind: str, features: Sequence[Feature], T: int) -> torch.Tensor:
    """Gold labels of a batch, ``-100`` (NaN for regression) where a feature has none."""
    if kind == "tag":
        out = torch.full((len(features), T), losses.IGNORE, dtype=torch.long)
        for k, f in enumerate(features):
            if f.label is not None:
                out[k, : len(f.label)] = torch.tensor(f.label)
        return out
    if kind == "regress":
        return torch.tensor([float("nan") if f.label is None else float(f.label) for f in features])
    if kind == "span":
        return torch.tensor([list(f.label) if f.label is not None else [losses.IGNORE] * 2 for f in features])
    return torch.tensor([losses.IGNORE if f.label is None else int(f.label) for f in features])


def word_mask(features: Sequence[Feature], T: int) -> torch.Tensor:
    """``(B, T)`` bool: the first piece of every word (where a tagger's prediction is read)."""
    out = torch.zeros((len(features), T), dtype=torch.bool)
    for k, f in enumerate(features):
        for t, w in enumerate(f.word_ids or []):
            out[k, t] = w is not None
    return out


def padded_logits(rows: Sequence[np.ndarray], kind: str, T: int) -> torch.Tensor:
    """Per-feature teacher logits as one batch tensor (token-level kinds zero-padded to ``T``)."""
    if kind not in _TOKEN_LEVEL:
        return torch.from_numpy(np.stack(rows)).float()
    out = torch.zeros((len(rows), T, rows[0].shape[-1]))
    for k, r in enumerate(rows):
        out[k, : r.shape[0]] = torch.from_numpy(r)
    return out


@contextlib.contextmanager
def attention_maps(model: nn.Module, keep_grad: bool) -> Iterator[list[torch.Tensor]]:
    """Collect every self-attention layer's probabilities ``(B, heads, T, T)`` of the forward
    passes run inside, in layer order (``keep_grad``: differentiable, for the student)."""
    maps: list[torch.Tensor] = []
    layers = [m for m in model.modules() if isinstance(m, SelfAttention)]
    for m in layers:
        m.record, m.record_grad = maps.append, keep_grad
    try:
        yield maps
    finally:
        for m in layers:
            del m.record, m.record_grad


class DistillModel(nn.Module):
    """The student (``task``, what ``best/`` saves) + hidden-state projections; see the module docstring.

    ``layer_map[j]``: the teacher layer (1-based; 0 = embeddings) student layer ``j + 1`` learns from.
    """

    def __init__(self, student: TaskModel, teacher: TaskModel | None, weights: Weights, layer_map: list[int]) -> None:
        super().__init__()
        self.task, self.weights, self.layer_map = student, weights, list(layer_map)
        self.__dict__["teacher"] = teacher  # not a submodule: never trained, never checkpointed
        self.project = None
        if weights.hidden > 0:
            hs, ht = int(student.backbone.cfg.hidden_size), int(teacher.backbone.cfg.hidden_size)
            pairs = len(self.layer_map) + 1  # the embeddings and every student layer
            self.project = nn.ModuleList(nn.Linear(hs, ht, bias=False) if hs != ht else nn.Identity()
                                         for _ in range(pairs))

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor,
                labels: torch.Tensor, teacher_logits: torch.Tensor | None = None,
                soft_mask: torch.Tensor | None = None) -> DistillOutput:
        w, kind = self.weights, self.task.kind
        with attention_maps(self.task, True) if w.attention > 0 else contextlib.nullcontext([]) as student_maps:
            encoded, flat = self.task.encode(input_ids, token_type_ids, attention_mask)
        logits = self.task.from_encoded(encoded, flat, input_ids.shape).logits
        sums: dict[str, torch.Tensor] = {}
        if w.alpha > 0:
            sums["soft"] = w.alpha * losses.soft_sum(kind, logits, teacher_logits, w.soft_loss, w.temperature, soft_mask)
        if w.alpha < 1:
            sums["gold"] = (1 - w.alpha) * losses.gold_sum(kind, logits, labels)
        if w.hidden > 0 or w.attention > 0:
            sums.update(self._intermediate(encoded, student_maps, input_ids, token_type_ids, attention_mask))
        return DistillOutput(sums, logits)

    def _intermediate(self, encoded, student_maps: list[torch.Tensor], input_ids: torch.Tensor,
                      token_type_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        teacher, w = self.teacher, self.weights
        with torch.no_grad(), attention_maps(teacher, False) if w.attention > 0 else contextlib.nullcontext([]) as maps:
            t_encoded, _ = teacher.encode(input_ids, token_type_ids, attention_mask)
        mask = encoded.mask.reshape(-1, encoded.mask.shape[-1])  # (B·R, T)
        out = {}
        if w.hidden > 0:
            pairs = [(0, 0), *((j + 1, t) for j, t in enumerate(self.layer_map))]
            student = [self.project[k](encoded.layers[s]) for k, (s, _) in enumerate(pairs)]
            out["hidden"] = w.hidden * losses.hidden_sum(student, [t_encoded.layers[t] for _, t in pairs], mask)
        if w.attention > 0:
            pairs = [(j, t - 1) for j, t in enumerate(self.layer_map) if t > 0]
            out["attention"] = w.attention * losses.attention_sum([student_maps[s] for s, _ in pairs],
                                                                  [maps[t] for _, t in pairs], mask)
        return out
