"""``muppets multitask CONFIG.yaml``: train several tasks together, keep each task's best model.

1. Read every task (as ``finetune`` does: a registered name or your own files) and build one
   task model per task on the configured backbone — sharing ONE backbone (hard) or each with
   its own copy (soft). Every task holds out its own selection examples
   (:mod:`muppets.transfer.selection`: a train slice, or dev when it has a labelled test);
   the reported splits never choose anything.
2. Build the batches (:mod:`muppets.multitask.data`): alternating with a task sampler, or
   joint, where tasks with the same training inputs (CoNLL-2003's POS, chunk and NER tags of
   one sentence) share one batch and, with hard sharing, one encoder pass.
3. Train with the shared :class:`~muppets.train.Trainer` (AdamW, warmup + linear decay,
   accumulation, clipping, atomic checkpoints and exact resume — the sampler and the weights'
   state included, DDP). An epoch is ``Σ_k`` (alternating) or ``max_k`` (joint) of the tasks'
   batches; at each epoch end (and every ``eval_every`` steps) every task is scored on its
   selection examples and, when it improves, saved to ``tasks/<name>/best`` (a standard
   fine-tuned directory: ``muppets evaluate``, ``Predictor`` and transformers read it).
   ``log.jsonl`` gets ``eval/<task>/<metric>`` and ``eval/weight/<task>`` (adaptive weights
   also ``weight/<task>`` after every update); ``multitask.png``, redrawn at every evaluation,
   plots the scores, the weights and each task's unweighted training loss.
4. Save ``tasks/<name>/final`` (the model after the last step), reload each ``best``, predict
   dev and test (``tasks/<name>/predictions.jsonl``), and with ``then_finetune`` (MT-DNN) fine-tune
   each task alone from its ``final`` model (head kept) into ``finetuned/<name>``.
   ``metrics.json`` holds every task's scores.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from muppets.config import to_dict, write_json_atomic
from muppets.errors import TrainingInterrupted
from muppets.heads import TaskModel
from muppets.multitask.config import MultitaskConfig
from muppets.multitask.data import GroupData, MultiTaskData, TaskFeatures
from muppets.multitask.model import MultiTaskModel
from muppets.multitask.plots import write_multitask_plot
from muppets.multitask.samplers import TaskSchedule
from muppets.multitask.weighting import ADAPTIVE, TaskWeighting
from muppets.nn.block import init_weights
from muppets.tasks.spec import TaskData, TaskSpec
from muppets.train import Trainer, seed_everything
from muppets.train.device import pick_device
from muppets.train.distributed import barrier, init_distributed
from muppets.transfer import finetune as ft
from muppets.transfer.features import Feature, make_features
from muppets.transfer.models import default_orderings, load_tokenizer, new_task_model

log = logging.getLogger(__name__)


@dataclass
class _Task:
    """One task of the run, everything built before training."""

    name: str
    cfg: ft.FinetuneConfig  # its fine-tuning settings (orderings resolved)
    data: TaskData
    model: TaskModel
    train: list  # training examples
    features: list[Feature]  # their features (weak labels resolved)
    selection: str  # resolved selection mode
    select: list  # examples that choose its best model ([] = the last model is kept)
    select_features: list[Feature]

    @property
    def spec(self) -> TaskSpec:
        return self.data.spec

    @property
    def key(self) -> str:
        return ft.primary_key(self.spec.metric)


def load_datas(cfg: MultitaskConfig) -> dict[str, TaskData]:
    """Every task's data, by the names the config gives them."""
    return {entry.name: ft.load_task_data(entry) for entry in cfg.tasks}


def _build_tasks(cfg: MultitaskConfig, datas: dict[str, TaskData], model_dir: Path, tok: Any,
                 device: torch.device) -> list[_Task]:
    """Task models in config order (the first task's head is drawn first after seeding, as a
    single-task run draws it), on one backbone (hard) or one each (soft)."""
    seed_everything(cfg.finetune.seed)
    tasks: list[_Task] = []
    for entry in cfg.tasks:
        data = datas[entry.name]
        tcfg = cfg.task_config(entry)
        if tcfg.orderings == 0:
            tcfg = dataclasses.replace(tcfg, orderings=default_orderings(data.spec.name, data.spec.kind, model_dir))
        model = new_task_model(model_dir, data.spec.kind, data.spec.num_labels or None, tok,
                               tcfg.orderings, tcfg.lm_coef, tcfg.pool or None,
                               dropout=None if tcfg.dropout < 0 else tcfg.dropout)
        if cfg.sharing == "hard" and tasks:
            model.backbone = tasks[0].model.backbone
        if tcfg.init == "random":
            init_weights(model, model.backbone.cfg.initializer_range)
            if cfg.sharing == "soft" and tasks and tasks[0].cfg.init == "random":
                # soft sharing starts every encoder at the same point, drawn once (heads differ)
                model.backbone.load_state_dict(tasks[0].model.backbone.state_dict())
        ft.check_length(tcfg, model)
        ft.warn_untrained_positions(tcfg, model_dir)
        model.to(device)
        train, mode, chosen, _ = ft.selection_split(tcfg, data)
        train = ft.confident(train, tcfg.min_confidence)
        features = ft.weak_targets(make_features(data.spec.kind, train, tok, tcfg.feature_options, data.spec.labels),
                                   train, data.spec, tcfg.weak_labels)
        chosen_features = make_features(data.spec.kind, chosen, tok, tcfg.feature_options, data.spec.labels)
        tasks.append(_Task(entry.name, tcfg, data, model, train, features, mode, chosen, chosen_features))
        log.info("task %s (%s): %d training features, selection %s on %d examples", entry.name,
                 data.spec.kind, len(features), mode, len(chosen))
    return tasks


def _groups(cfg: MultitaskConfig, tasks: list[_Task], pad_id: int) -> list[GroupData]:
    """One group per task; in joint mode, tasks whose training inputs are identical share one."""
    members: list[list[_Task]] = []
    for task in tasks:
        home = None
        if cfg.mode == "joint":
            home = next((m for m in members if _same_inputs(m[0], task)), None)
        if home is None:
            members.append([task])
        else:
            home.append(task)
            log.info("task %s shares its batches with %s (same training inputs)", task.name, home[0].name)
    base = cfg.finetune
    return [GroupData(f"g{i}", [TaskFeatures(t.name, t.spec.kind, t.features, t.model.lm_orderings) for t in m],
                      base.batch_size, base.accumulation, base.seed, pad_id, base.bucket_batches)
            for i, m in enumerate(members)]


def _same_inputs(a: _Task, b: _Task) -> bool:
    return (a.spec.kind == b.spec.kind and len(a.features) == len(b.features)
            and all(x.input_ids == y.input_ids for x, y in zip(a.features, b.features)))


def _epoch_steps(cfg: MultitaskConfig, groups: list[GroupData]) -> int:
    sizes = [g.steps_per_epoch for g in groups]
    return sum(sizes) if cfg.mode == "alternating" else max(sizes)


def _weights_now(model: MultiTaskModel, names: list[str]):
    """``weight/<task>`` after each update, so an adaptive weighting's path is in ``log.jsonl``."""
    def extras() -> dict[str, float]:
        weights = model.weighting.weights()
        return {f"weight/{name}": float(weights[i]) for i, name in enumerate(names)}
    return extras


def _evaluator(tasks: list[_Task], tok: Any):
    """Every task's metric on its selection examples (``<task>/<metric>``), their mean of the
    primary scores (``mean``), and the current weights (``weight/<task>``)."""

    def evaluate(model: MultiTaskModel) -> dict[str, float]:
        out: dict[str, float] = {}
        primaries = []
        for t in tasks:
            if not t.select:
                continue
            metrics = ft.predict_and_score(model.tasks[t.name], tok, t.spec, t.select, t.cfg, t.select_features)[1]
            out.update({f"{t.name}/{k}": v for k, v in metrics.items()})
            primaries.append(metrics[t.key])
        if primaries:
            out["mean"] = float(np.mean(primaries))
        weights = model.weighting.weights()
        out.update({f"weight/{t.name}": float(weights[i]) for i, t in enumerate(tasks)})
        return out

    return evaluate


class _Keepers:
    """Per task, a :class:`~muppets.transfer.finetune.BestKeeper` that saves
    ``tasks/<name>/best`` when the task's selection score improves; training stops early
    when every task's patience has run out."""

    def __init__(self, tasks: list[_Task], tok: Any, run_dir: Path, patience: int, is_main: bool,
                 fresh: bool) -> None:
        self.keepers = {}
        for t in tasks:
            if t.select:
                save = ft.model_saver(t.model, tok, t.spec, t.cfg, run_dir / "tasks" / t.name / "best")
                self.keepers[t.name] = ft.BestKeeper(run_dir / "tasks" / t.name / "early_stopping.json",
                                                     t.key, patience, save, is_main, fresh=fresh)

    def __call__(self, step: int, metrics: dict[str, float]) -> bool:
        stopped = [keeper(step, {keeper.key: metrics[f"{name}/{keeper.key}"]})
                   for name, keeper in self.keepers.items()]
        return bool(stopped) and all(stopped)


def run(cfg: MultitaskConfig, resume: bool = True, datas: dict[str, TaskData] | None = None) -> dict:
    """Multi-task training (see the module docstring); returns the summary (``metrics.json``)."""
    run_dir, dist, base = cfg.resolved_run_dir(), init_distributed(), cfg.finetune
    if base.threads > 0:
        torch.set_num_threads(base.threads)
    datas = datas or load_datas(cfg)
    model_dir = ft.resolve_model(base.model)
    tok = load_tokenizer(model_dir)
    tasks = _build_tasks(cfg, datas, model_dir, tok, pick_device(base.device, dist.local_rank))
    groups = _groups(cfg, tasks, tok.pad_id)
    epoch_steps = _epoch_steps(cfg, groups)
    steps = cfg.steps or base.epochs * epoch_steps
    schedule = (TaskSchedule([g.steps_per_epoch for g in groups], cfg.sampler, steps, base.epochs, base.seed,
                             cfg.temperature, cfg.anneal_min) if cfg.mode == "alternating" else None)
    weighting = TaskWeighting(cfg.names, cfg.weighting, [e.weight for e in cfg.tasks], base.lr, cfg.weight_lr,
                              cfg.gradnorm_alpha, cfg.dwa_temperature,
                              (cfg.dwa_window or epoch_steps) * base.accumulation)
    start_weights = dict(zip(cfg.names, weighting.weights().tolist()))  # before a resume loads the checkpoint's
    model = MultiTaskModel({t.name: t.model for t in tasks}, weighting, cfg.sharing, cfg.soft_penalty)
    model.weighting.to(next(model.parameters()).device)
    data = MultiTaskData(groups, cfg.mode, schedule, model.extra_terms)
    keepers = _Keepers(tasks, tok, run_dir, base.patience, dist.is_main, fresh=not resume)
    keys = {t.name: t.key for t in tasks}
    log.info("multi-task: %d tasks in %d groups, %s, %d steps (%d per epoch), weighting %s, sharing %s",
             len(tasks), len(groups), cfg.mode, steps, epoch_steps, cfg.weighting, cfg.sharing)
    repeats = [f"{g.group} {epoch_steps / g.steps_per_epoch:.1f}x" for g in groups if g.steps_per_epoch < epoch_steps]
    if cfg.mode == "joint" and repeats:  # an epoch is the largest group's: the smaller ones cycle
        log.info("joint: an epoch is the largest group's %d batches; the smaller groups repeat within it: %s",
                 epoch_steps, ", ".join(repeats))
    trainer = Trainer(model, data, ft.train_config(base, steps, epoch_steps), run_dir,
                      evaluate=_evaluator(tasks, tok), run_config=to_dict(cfg),
                      should_stop=keepers,
                      eval_also_at=lambda step: step % epoch_steps == 0,
                      step_extras=_weights_now(model, cfg.names) if cfg.weighting in ADAPTIVE else None,
                      draw=lambda: write_multitask_plot(run_dir, keys, start_weights),
                      after_training=("then_finetune", "finetune_epochs", "finetune_lr"))
    result = trainer.train(resume=resume)
    if result.interrupted:
        raise TrainingInterrupted(f"{run_dir}: stopped by a signal after step {result.step} (checkpoint "
                                  f"{result.checkpoint}); run the same command again to resume it")
    if dist.is_main:
        _save_final(tasks, tok, run_dir, keepers)
        write_multitask_plot(run_dir, keys, start_weights)
    barrier()
    summary = {"tasks": cfg.names, "run_dir": str(run_dir), "model": str(model_dir), "mode": cfg.mode,
               "sampler": cfg.sampler if cfg.mode == "alternating" else None, "weighting": cfg.weighting,
               "sharing": cfg.sharing, "seed": base.seed, "steps": result.step, "steps_per_epoch": epoch_steps,
               "stopped_early": result.stopped_early, "per_task": {}}
    for t in tasks:
        entry = {"selection": t.selection, "selection_examples": len(t.select), "train_examples": len(t.train),
                 "best_step": keepers.keepers[t.name].state["best_step"] if t.name in keepers.keepers else result.step,
                 "best_selection_score": keepers.keepers[t.name].state["best"] if t.name in keepers.keepers else None}
        if dist.is_main:
            entry.update(ft.final_predictions(run_dir / "tasks" / t.name, t.data, t.cfg,
                                              ft.selected_on(t.selection, t.select, t.data, t.cfg)))
        summary["per_task"][t.name] = entry
    if cfg.then_finetune:
        _then_finetune(cfg, tasks, run_dir, resume, summary)
    if dist.is_main:
        write_json_atomic(run_dir / "metrics.json", summary)
    return summary


def _save_final(tasks: list[_Task], tok: Any, run_dir: Path, keepers: _Keepers) -> None:
    """``tasks/<name>/final`` for every task; ``best`` = ``final`` where nothing selects."""
    for t in tasks:
        ft.model_saver(t.model, tok, t.spec, t.cfg, run_dir / "tasks" / t.name / "final")()
        if t.name not in keepers.keepers:
            log.info("task %s: selection=%s, best/ is the model after the last step", t.name, t.selection)
            ft.model_saver(t.model, tok, t.spec, t.cfg, run_dir / "tasks" / t.name / "best")()


def _then_finetune(cfg: MultitaskConfig, tasks: list[_Task], run_dir: Path, resume: bool, summary: dict) -> None:
    """MT-DNN's second stage: each task fine-tuned alone from its multi-task ``final`` model."""
    for t in tasks:
        tcfg = dataclasses.replace(t.cfg, model=str(run_dir / "tasks" / t.name / "final"),
                                   run_dir=str(run_dir / "finetuned" / t.name),
                                   epochs=cfg.finetune_epochs or t.cfg.epochs, lr=cfg.finetune_lr or t.cfg.lr)
        result = ft.run(tcfg, resume=resume, data=t.data)
        summary["per_task"][t.name]["finetuned"] = {k: result[k] for k in ("dev", "test", "best_step", "steps")
                                                    if k in result}

