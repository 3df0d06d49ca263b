"""The :class:`~muppets.train.StepData` of multi-task training: alternating or joint batches.

* **alternating** — step ``s`` trains one group (a task, or tasks on the same inputs), drawn by
  the :class:`~muppets.multitask.samplers.TaskSchedule`; the group's ``i``-th draw takes its
  ``i``-th batch in its own epoch order. The tasks' data need no alignment.
* **joint** — every step holds one batch of EVERY group (its batch number ``s`` in its own
  epoch order; a smaller task starts its next epoch sooner), so the loss is ``Σ_k w_k · L_k``
  on the same update and the weights can adapt (:mod:`muppets.multitask.weighting`).

Each group's batches are a :class:`~muppets.transfer.batching.EpochData` (length-bucketed,
a pure function of ``(seed, epoch)``), so a step's batches depend on the step alone and a
resumed run is exact. Keys are ``"<group>/<field>"`` (:mod:`muppets.multitask.model`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from muppets.errors import ConfigError
from muppets.multitask.model import INPUTS, split_groups
from muppets.multitask.samplers import TaskSchedule
from muppets.transfer.batching import EpochData, collate, lm_targets, loss_units
from muppets.transfer.features import Feature

MODES = ("alternating", "joint")


@dataclass
class TaskFeatures:
    """One task's training features and what its loss terms need."""

    name: str
    kind: str
    features: list[Feature]
    lm_orderings: int = 0  # GPT: rows per input its auxiliary LM term reads the first of (0 = no term)


class GroupData(EpochData):
    """The batches of one group: the inputs of its first task's features and every task's
    labels. Tasks in one group must have the same inputs, feature by feature."""

    def __init__(self, group: str, tasks: Sequence[TaskFeatures], batch_size: int, accumulation: int,
                 seed: int, pad_id: int, bucket_batches: int = 0) -> None:
        first = tasks[0]
        for other in tasks[1:]:
            same = len(other.features) == len(first.features) and all(
                a.input_ids == b.input_ids for a, b in zip(first.features, other.features))
            if not same:
                raise ConfigError(f"tasks {first.name!r} and {other.name!r} cannot share batches: "
                                  "their training inputs differ")
        super().__init__(first.features, first.kind, batch_size, accumulation, 1, seed, pad_id,
                         bucket_batches=bucket_batches)
        self.group, self.tasks = group, list(tasks)

    def collate(self, indices: list[int]) -> dict[str, torch.Tensor]:
        batch = collate([self.features[i] for i in indices], self.pad_id)
        out = {f"{self.group}/{k}": batch[k] for k in INPUTS}
        for task in self.tasks:
            part = collate([task.features[i] for i in indices], self.pad_id)
            if "labels" not in part:
                raise ConfigError(f"task {task.name!r}: a training feature has no label")
            out[f"{self.group}/labels/{task.name}"] = part["labels"]
        return out


class MultiTaskData:
    """Alternating or joint batches over ``groups`` (see the module docstring)."""

    def __init__(self, groups: Sequence[GroupData], mode: str, schedule: TaskSchedule | None = None,
                 extra_terms: Sequence[str] = ()) -> None:
        if mode not in MODES:
            raise ConfigError(f"mode {mode!r}: expected one of {MODES}")
        if mode == "alternating" and schedule is None:
            raise ConfigError("alternating training needs a task schedule")
        self.groups, self.mode, self.schedule = list(groups), mode, schedule
        self.extra_terms = list(extra_terms)
        self.tasks = {t.name: t for g in self.groups for t in g.tasks}

    def micro_batches(self, step: int, rank: int, world: int) -> list[dict[str, torch.Tensor]]:
        if self.mode == "alternating":
            assert self.schedule is not None
            group, index = self.schedule.position(step)
            return self.groups[group].micro_batches(index, rank, world)
        per_group = [g.micro_batches(step, rank, world) for g in self.groups]
        return [{k: v for parts in micro for k, v in parts.items()} for micro in zip(*per_group)]

    def normalizers(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        units: dict[str, float] = {}
        for group in split_groups(batch).values():
            for field, labels in group.items():
                if not field.startswith("labels/"):
                    continue
                task = self.tasks[field[len("labels/"):]]
                units[f"task:{task.name}"] = loss_units(task.kind, labels)
                if task.lm_orderings:
                    units[f"lm:{task.name}"] = float(lm_targets(group["attention_mask"], task.lm_orderings).sum())
        units.update({term: 1.0 for term in self.extra_terms})
        return units

    def num_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        return sum(int(g["attention_mask"].sum()) for g in split_groups(batch).values())
