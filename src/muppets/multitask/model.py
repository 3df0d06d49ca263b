"""Several task models trained together: hard or soft parameter sharing.

* **Hard sharing** — every :class:`~muppets.heads.TaskModel` holds the SAME backbone module and
  its own head (Caruana 1997; MT-DNN). Checkpoints and the optimizer see the shared weights once
  (``named_parameters`` and safetensors' ``save_model`` de-duplicate them).
* **Soft sharing** — each task keeps its own backbone (all loaded from the same checkpoint),
  and the training loss adds ``λ · Σ_{a<b} ||θ_a - θ_b||²`` over the backbones' parameters
  (Duong et al. 2015), computed as ``λ · K · Σ_k ||θ_k - θ̄||²`` (the same quantity, O(K)).

A micro-batch is a dict of **groups**: ``"<group>/input_ids"``, ``"<group>/token_type_ids"``,
``"<group>/attention_mask"`` and one ``"<group>/labels/<task>"`` per task of the group. A group
is one task, or several tasks on the SAME inputs (CoNLL-2003's POS, chunk and NER tags of one
sentence: the aligned case), which hard sharing encodes once for all of them.

The forward returns the Trainer's terms (:mod:`muppets.train.trainer`): per task present,
``"task:<name>"`` (its loss SUM, weighted by :class:`~muppets.multitask.weighting.TaskWeighting`)
and each auxiliary term of the task (GPT's ``"lm:<name>"``); ``"share"`` (soft sharing) and
``"weighting"`` (learned weights) once per micro-batch.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
from torch import nn

from muppets.errors import ConfigError
from muppets.heads import TaskModel
from muppets.multitask.weighting import TaskWeighting
from muppets.transfer.batching import loss_units

SHARINGS = ("hard", "soft")
INPUTS = ("input_ids", "token_type_ids", "attention_mask")


@dataclass
class MultiTaskOutput:
    loss_sums: dict[str, torch.Tensor]  # the Trainer's terms (see the module docstring)


def split_groups(batch: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """``{"g/input_ids": x, "g/labels/t": y}`` -> ``{"g": {"input_ids": x, "labels/t": y}}``."""
    groups: dict[str, dict[str, torch.Tensor]] = defaultdict(dict)
    for key, value in batch.items():
        group, _, field = key.partition("/")
        groups[group][field] = value
    return dict(groups)


def last_shared_weight(backbone: nn.Module) -> nn.Parameter:
    """GradNorm's ``W``: the last matrix of the backbone outside its pooler (the top layer's
    feed-forward output for BERT and GPT)."""
    found = [p for name, p in backbone.named_parameters() if p.ndim == 2 and "pooler" not in name]
    if not found:
        raise ConfigError(f"{type(backbone).__name__} has no weight matrix for GradNorm to normalise")
    return found[-1]


class MultiTaskModel(nn.Module):
    """Task models (one per task, in ``tasks`` order) under one training loss.

    Args:
        tasks: ``{name: TaskModel}``; with ``sharing="hard"`` they must share one backbone.
        weighting: how the task terms are weighted.
        sharing: ``hard`` | ``soft``; ``penalty``: soft sharing's λ.
    """

    def __init__(self, tasks: dict[str, TaskModel], weighting: TaskWeighting, sharing: str = "hard",
                 penalty: float = 0.0) -> None:
        super().__init__()
        if sharing not in SHARINGS:
            raise ConfigError(f"sharing {sharing!r}: expected one of {SHARINGS}")
        if penalty < 0:
            raise ConfigError(f"soft sharing penalty {penalty} must be >= 0")
        backbones = {id(t.backbone) for t in tasks.values()}
        if sharing == "hard" and len(backbones) != 1:
            raise ConfigError("hard sharing needs every task model on the same backbone module")
        if sharing == "soft" and len(backbones) != len(tasks):
            raise ConfigError("soft sharing needs one backbone module per task")
        self.tasks = nn.ModuleDict(tasks)
        self.weighting, self.sharing, self.penalty = weighting, sharing, penalty
        first = next(iter(tasks.values()))
        self._shared = last_shared_weight(first.backbone) if weighting.method == "gradnorm" else None
        if weighting.method == "gradnorm" and sharing != "hard":
            raise ConfigError("gradnorm normalises gradients at a shared layer: it needs sharing=hard")

    def forward(self, **batch: torch.Tensor) -> MultiTaskOutput:
        sums: dict[str, torch.Tensor] = {}
        units: dict[str, float] = {}
        aux: dict[str, torch.Tensor] = {}
        for group in split_groups(batch).values():
            names = [field[len("labels/"):] for field in group if field.startswith("labels/")]
            self._group(group, names, sums, units, aux)
        terms = self.weighting.combine(sums, units, self._shared)
        terms.update(aux)
        if "share" in self.extra_terms:
            terms["share"] = self.share_penalty()
        return MultiTaskOutput(terms)

    @property
    def extra_terms(self) -> list[str]:
        """The terms counted once per micro-batch: ``"share"`` (soft sharing with λ > 0) and
        ``"weighting"`` (learned task weights)."""
        extra = ["share"] if self.sharing == "soft" and self.penalty > 0 else []
        return extra + (["weighting"] if self.weighting.adds_term else [])

    def _group(self, group: dict[str, torch.Tensor], names: list[str], sums: dict, units: dict,
               aux: dict) -> None:
        """Each task of one group: encode (once per backbone), head, loss sum and units."""
        inputs = [group.get(k) for k in INPUTS]
        encodings: dict[int, tuple] = {}
        for name in names:
            model = self.tasks[name]
            key = id(model.backbone)
            if key not in encodings:
                encodings[key] = model.encode(*inputs)
            encoded, flat_ids = encodings[key]
            labels = group[f"labels/{name}"]
            out = model.from_encoded(encoded, flat_ids, inputs[0].shape, labels)
            n = loss_units(model.kind, labels)
            units[name] = n
            sums[name] = out.task_loss * n if n > 0 else out.logits.sum() * 0.0
            aux.update({f"{term}:{name}": total for term, total in out.aux_sums.items()})

    def share_penalty(self) -> torch.Tensor:
        """λ · K · Σ_k ||θ_k - θ̄||² over the backbones' parameters (= λ · Σ_{a<b} ||θ_a - θ_b||²)."""
        backbones = [t.backbone for t in self.tasks.values()]
        params = [p for group in zip(*(b.parameters() for b in backbones)) for p in group]
        return _SharePenalty.apply(self.penalty, len(backbones), *params)


class _SharePenalty(torch.autograd.Function):
    """``λ · K · Σ_k ||θ_k - θ̄||²`` with its gradient ``2 λ K (θ_k - θ̄)`` written directly.

    Autograd through the stacked copies recorded the whole computation: seconds per step for five
    MiniLM encoders, as much as the task's own step. Here nothing is recorded; the forward keeps
    references to the parameters and each position's mean, which the backward reuses.
    (The mean's own derivative vanishes: Σ_k (θ_k - θ̄) = 0.) ``params`` holds the K copies of
    the first parameter, then the K copies of the second, and so on.
    """

    @staticmethod
    def forward(ctx, strength: float, k: int, *params: torch.Tensor) -> torch.Tensor:
        ctx.strength, ctx.k = strength, k
        ctx.save_for_backward(*params)
        ctx.means, total = [], torch.zeros((), device=params[0].device)
        for i in range(0, len(params), k):
            copies = [p.detach().float() for p in params[i:i + k]]
            mean = copies[0].clone()
            for c in copies[1:]:
                mean.add_(c)
            mean.div_(k)
            ctx.means.append(mean)  # kept for the backward: one copy's worth of memory
            for c in copies:
                diff = (c - mean).flatten()
                total += torch.dot(diff, diff)
        return strength * k * total

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        params, k = ctx.saved_tensors, ctx.k
        scale = 2.0 * ctx.strength * k * grad
        grads = []
        for i, mean in zip(range(0, len(params), k), ctx.means):
            grads += [((c.float() - mean) * scale).to(c.dtype) for c in params[i:i + k]]
        return (None, None, *grads)
