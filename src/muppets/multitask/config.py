"""The settings of a multi-task run (``muppets multitask CONFIG.yaml``).

Everything a task's fine-tuning needs (model, learning rate, batch size, sequence length,
selection, seed …) is a :class:`~muppets.transfer.finetune.FinetuneConfig`, ``finetune``: the
same settings, the same meaning. The multi-task stage adds the task list, how tasks are mixed
(``mode``, ``sampler``), weighted (``weighting``) and shared (``sharing``), and, for the MT-DNN
recipe, per-task fine-tuning afterwards (``then_finetune``)::

    run_dir: runs/mtl-glue
    tasks: [{name: rte}, {name: mrpc}, {name: stsb}]
    mode: alternating
    sampler: temperature
    finetune: {model: minilm, lr: 5.0e-5, epochs: 3, batch_size: 32}
    then_finetune: true
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from muppets.config import in_file, load_typed
from muppets.errors import ConfigError
from muppets.multitask.data import MODES
from muppets.multitask.model import SHARINGS
from muppets.multitask.samplers import SAMPLERS
from muppets.multitask.weighting import ADAPTIVE, WEIGHTINGS
from muppets.tasks import list_tasks
from muppets.transfer.finetune import FinetuneConfig, TaskSection


@dataclass
class TaskEntry(TaskSection):
    weight: float = 1.0  # fixed weighting: this task's loss weight (0 = trained on, never moves the model)
    max_train_examples: int = 0  # use only the first N training examples of this task (0 = all)


@dataclass
class MultitaskConfig:
    tasks: list[TaskEntry] = field(default_factory=list)  # the tasks; each a registered name or your own files (as finetune's task section) + weight
    run_dir: str = ""  # "" = runs/multitask/<task names joined by '+'>
    mode: str = "alternating"  # alternating (one task per step, drawn by the sampler) | joint (a batch of every task per step: Σ w_k L_k)
    sampler: str = "proportional"  # alternating: proportional | temperature | uniform | annealed (muppets.multitask.samplers)
    temperature: float = 2.0  # sampler=temperature: p_k ∝ n_k^(1/T) (2 = square root)
    anneal_min: float = 0.2  # sampler=annealed: the exponent in the last epoch (Stickland & Murray: 0.2)
    weighting: str = "fixed"  # fixed (the tasks' weights) | uncertainty | gradnorm | dwa (adaptive: joint mode only)
    weight_lr: float = 0.025  # uncertainty / gradnorm: step size of the learned weights
    gradnorm_alpha: float = 1.5  # gradnorm: α, how strongly slower tasks are pushed
    dwa_temperature: float = 2.0  # dwa: T of the softmax over loss ratios
    dwa_window: int = 0  # dwa: steps per loss window (0 = one epoch of the run)
    sharing: str = "hard"  # hard (one encoder, a head per task) | soft (an encoder per task + L2 penalty between them)
    soft_penalty: float = 1.0e-3  # sharing=soft: λ of λ·Σ_{a<b} ||θ_a - θ_b||²
    steps: int = 0  # optimizer steps (0 = finetune.epochs × one epoch: alternating Σ_k batches_k, joint max_k batches_k)
    then_finetune: bool = False  # MT-DNN: afterwards fine-tune each task alone from the multi-task model (its head kept)
    finetune_epochs: int = 0  # then_finetune: epochs of the per-task runs (0 = finetune.epochs)
    finetune_lr: float = 0.0  # then_finetune: peak lr of the per-task runs (0 = finetune.lr)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)  # model, lr, batch size, seed, selection … shared by every task (its task section is unused)

    def __post_init__(self) -> None:
        checks = [("mode", self.mode in MODES), ("sampler", self.sampler in SAMPLERS),
                  ("weighting", self.weighting in WEIGHTINGS), ("sharing", self.sharing in SHARINGS),
                  ("temperature", self.temperature > 0), ("anneal_min", 0.0 <= self.anneal_min <= 1.0),
                  ("weight_lr", self.weight_lr > 0), ("dwa_temperature", self.dwa_temperature > 0),
                  ("dwa_window", self.dwa_window >= 0), ("soft_penalty", self.soft_penalty >= 0),
                  ("steps", self.steps >= 0), ("finetune_epochs", self.finetune_epochs >= 0),
                  ("finetune_lr", self.finetune_lr >= 0)]
        for name, ok in checks:
            if not ok:
                raise ConfigError(f"{name}: invalid value {getattr(self, name)!r}", key=name)
        if self.weighting in ADAPTIVE and self.mode != "joint":
            raise ConfigError(f"weighting={self.weighting} adapts weights on a step that holds every "
                              "task: it needs mode=joint", key="weighting")
        if self.weighting == "gradnorm" and self.sharing != "hard":
            raise ConfigError("weighting=gradnorm normalises gradients at a shared layer: it needs sharing=hard",
                              key="weighting")
        # a setting the run would not use is refused, not ignored (defaults aside: they cannot be told from unset)
        if self.mode == "joint" and self.sampler != "proportional":
            raise ConfigError(f"sampler={self.sampler}: samplers draw one task per step (mode=alternating); "
                              "mode=joint takes a batch of every task at every step", key="sampler")
        if self.sharing == "hard" and self.soft_penalty != _default(MultitaskConfig, "soft_penalty"):
            raise ConfigError(f"soft_penalty={self.soft_penalty}: the penalty between encoders needs sharing=soft",
                              key="soft_penalty")
        names = [t.name for t in self.tasks]
        if any(not n for n in names):
            raise ConfigError("tasks: every task needs a name (a registered task, or a name for your files)",
                              key=f"tasks[{names.index(next(n for n in names if not n))}]")
        if len(set(names)) != len(names):
            repeat = next(i for i, n in enumerate(names) if n in names[:i])
            raise ConfigError(f"tasks: names must be unique, got {names}", key=f"tasks[{repeat}].name")
        if len(self.tasks) == 1 and (self.weighting != "fixed" or self.sharing != "hard"):
            key = "weighting" if self.weighting != "fixed" else "sharing"
            raise ConfigError(f"{key}={getattr(self, key)} balances or ties tasks to each other, and there is one "
                              f"task ({names[0]}): list more tasks, or use {key}={_default(MultitaskConfig, key)}",
                              key=key)
        for i, t in enumerate(self.tasks):
            for key in ("weight", "max_train_examples"):
                if getattr(t, key) < 0:
                    raise ConfigError(f"tasks[{i}].{key} ({t.name}): invalid value {getattr(t, key)!r}, must be >= 0",
                                      key=f"tasks[{i}].{key}")
            if t.weight != 1.0 and self.weighting != "fixed":
                raise ConfigError(f"tasks[{i}].weight ({t.name}): {t.weight!r} is a fixed weight, and "
                                  f"weighting={self.weighting} sets the weights itself: use weighting=fixed",
                                  key=f"tasks[{i}].weight")

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tasks]

    def task_config(self, entry: TaskEntry) -> FinetuneConfig:
        """The fine-tuning settings of one task (its section and example limit)."""
        section = TaskSection(**{f.name: getattr(entry, f.name) for f in dataclasses.fields(TaskSection)})
        return dataclasses.replace(self.finetune, task=section,
                                   max_train_examples=entry.max_train_examples or self.finetune.max_train_examples)

    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir) if self.run_dir else Path("runs") / "multitask" / "+".join(self.names)


def _default(cls: type, name: str) -> object:
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def load_config(path: str | Path | None, overrides: Sequence[str]) -> MultitaskConfig:
    """YAML/JSON file + dotted ``key=value`` overrides (e.g. ``finetune.seed=2``), type-checked."""
    cfg = load_typed(MultitaskConfig, path, overrides)
    if len(cfg.tasks) < 1:
        raise ConfigError(f"{path or 'config'}: tasks: list at least one task")
    known = list_tasks()
    for i, t in enumerate(cfg.tasks):  # before any model or data is loaded (the library also takes TaskData)
        if not t.files and t.name not in known:
            err = ConfigError(f"tasks[{i}].name: unknown task {t.name!r}; registered tasks: {', '.join(known)} "
                              "(for your own data give the task's files)", key=f"tasks[{i}].name")
            raise (in_file(path, err) if path else err)
    return cfg
