"""A distillation run: ``muppets distill TEACHER --student …`` (:func:`run`).

1. read the teacher (a fine-tuned task directory): its task (``muppets_finetune.json``), its
   tokenizer and feature settings, which the student takes as they are;
2. build the student (:mod:`~muppets.distill.students`) and the transfer set
   (:mod:`~muppets.distill.transfer_set`): training examples (less the slice that selects the
   model, chosen as fine-tuning chooses it — :mod:`~muppets.transfer.selection`, never the
   reported split), unlabeled text, augmented copies;
3. label the transfer set with the teacher once (its logits for every feature);
4. train the student with the shared :class:`~muppets.train.Trainer` on the weighted terms of
   :mod:`~muppets.distill.losses` (checkpoints, exact resume, DDP, early stopping as
   fine-tuning), keep the best student as ``<run_dir>/best`` — a normal task directory that
   ``evaluate``, ``Predictor``, ``serve`` and ``export onnx`` take — and score dev (and test)
   with the task's metric into ``metrics.json``, which also says what the student is, what it
   learned from and how big the transfer set was.

With ``alpha=0`` and no intermediate losses the same command fine-tunes the student on the
gold labels alone: the baseline a distilled student is compared with (same initialisation,
same loop, same selection).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import torch

from muppets.config import atomic_dir, to_dict, write_json_atomic
from muppets.distill.config import DistillConfig
from muppets.distill.model import DistillData, DistillModel, Weights
from muppets.distill.students import build_student, load_teacher, parameters
from muppets.distill.transfer_set import build_transfer_set
from muppets.errors import ConfigError, TrainingInterrupted
from muppets.interop.hf_tasks import task_labels
from muppets.interop.model_card import Provenance, write_model_card
from muppets.sentence import keep_sentence_files
from muppets.train import Trainer, seed_everything
from muppets.train.device import pick_device
from muppets.train.distributed import barrier, init_distributed
from muppets.train.rundir import run_lock
from muppets.transfer.features import make_features
from muppets.transfer.finetune import (BestKeeper, FinetuneConfig, TaskSection, _evaluator, eval_labels,
                                       final_predictions, load_task_data, primary_key, selected_on,
                                       selection_split, train_config)
from muppets.transfer.models import load_tokenizer, save_task_model
from muppets.transfer.predict import feature_logits, load_settings, save_settings
from muppets.tasks.spec import TaskData

log = logging.getLogger(__name__)


def teacher_settings(cfg: DistillConfig) -> FinetuneConfig:
    """``cfg.train`` with what the teacher fixes: its task (unless ``train.task`` names one),
    its feature and span settings, and ``model`` = the teacher (provenance)."""
    from muppets.interop.safetensors_io import read_json_object
    from muppets.transfer.predict import SETTINGS_FILE

    teacher = Path(cfg.teacher)
    saved_file = teacher / SETTINGS_FILE
    saved = read_json_object(saved_file) if saved_file.is_file() else {}
    task = cfg.train.task
    if not (task.name or task.files):
        section = saved.get("finetune", {}).get("task") or ({"name": saved["task"]} if saved.get("task") else None)
        if section is None:
            raise ConfigError(f"teacher {cfg.teacher!r}: its {SETTINGS_FILE} names no task; give train.task.name "
                              "(or train.task.files)", key="train.task")
        known = {f.name for f in dataclasses.fields(TaskSection)}
        task = TaskSection(**{k: v for k, v in section.items() if k in known})
    feats, span = load_settings(teacher)
    out = dataclasses.replace(cfg.train, task=task, model=str(teacher))
    if feats is not None:
        out = dataclasses.replace(out, max_seq_len=feats.max_seq_len, doc_stride=feats.doc_stride,
                                  max_query_len=feats.max_query_len, orderings=feats.orderings,
                                  n_best=span.n_best, max_answer_len=span.max_answer_len,
                                  allow_null=span.allow_null, null_threshold=span.null_threshold)
    return out


def run_dir_of(cfg: DistillConfig, train: FinetuneConfig) -> Path:
    name = train.task.name or Path(str(next(iter(train.task.files.values()), "task"))).stem
    return Path(train.run_dir) if train.run_dir else Path("runs") / "distill" / name


def run(cfg: DistillConfig, resume: bool = True, data: TaskData | None = None) -> dict:
    """Distil, keep ``best/``, write predictions and metrics; returns the summary dict (see the
    module docstring). ``data``: the task already in memory (default: the teacher's task, read).
    The run holds its run_dir until its metrics are written."""
    if not cfg.teacher:
        raise ConfigError("teacher: give the fine-tuned task directory to distil (muppets finetune's best/)",
                          key="teacher")
    teacher = load_teacher(cfg.teacher)  # a clear error before anything is read or written
    train = teacher_settings(cfg)
    run_dir = run_dir_of(cfg, train)
    with run_lock(run_dir, enabled=init_distributed().is_main):
        return _run(cfg, train, run_dir, resume, data, teacher)


def _check_task(teacher_dir: str, teacher_kind: str, data: TaskData) -> None:
    spec = data.spec
    if teacher_kind != spec.kind:
        raise ConfigError(f"teacher {teacher_dir!r} is a {teacher_kind} model; task {spec.name!r} is {spec.kind}",
                          key="train.task")
    saved = task_labels(teacher_dir)
    if saved and saved != list(spec.labels):
        raise ConfigError(f"teacher {teacher_dir!r} was trained with labels {saved}; task {spec.name!r} has "
                          f"{list(spec.labels)}", key="train.task")


def _layer_map(cfg: DistillConfig, default: list[int], student: Any, teacher: Any) -> list[int]:
    if not cfg.intermediate:
        return default
    ls = int(getattr(student.backbone.cfg, "num_layers", 0))
    lt = int(getattr(teacher.backbone.cfg, "num_layers", 0))
    layer_map = list(cfg.layer_map) or default
    if not ls or len(layer_map) != ls or any(not 0 <= t <= lt for t in layer_map):
        raise ConfigError(f"layer_map={layer_map}: give one teacher layer (0..{lt}; 0 = embeddings) for each of the "
                          f"student's {ls} layers (intermediate losses need a transformer student)", key="layer_map")
    if cfg.attention_weight > 0 and not isinstance(getattr(student.backbone, "layers", None), torch.nn.ModuleList):
        raise ConfigError("attention_weight: the student has no attention layers to compare", key="attention_weight")
    return layer_map


def _run(cfg: DistillConfig, train_cfg: FinetuneConfig, run_dir: Path, resume: bool, data: TaskData | None,
         teacher: Any) -> dict:
    dist = init_distributed()
    if train_cfg.threads > 0:
        torch.set_num_threads(train_cfg.threads)
    tok = load_tokenizer(cfg.teacher)
    data = data or load_task_data(train_cfg.task)
    spec = data.spec
    _check_task(cfg.teacher, teacher.kind, data)
    seed_everything(train_cfg.seed)  # the student's fresh weights
    student, default_map = build_student(cfg, teacher, tok)
    kept = [t - 1 for t in default_map] if cfg.student == "teacher" else None
    layer_map = _layer_map(cfg, default_map, student, teacher)
    train, mode, chosen, dev = selection_split(train_cfg, data)
    tset = build_transfer_set(spec.kind, train, data, cfg.unlabeled, cfg.max_unlabeled, cfg.augment,
                              cfg.augment_mask, cfg.augment_ngram, cfg.augment_seed, tok.settings.special_tokens()["mask"]
                              if hasattr(tok, "settings") else "[MASK]", cfg.unlabeled_format, cfg.unlabeled_unit,
                              selecting=chosen)
    features = make_features(spec.kind, tset.examples, tok, train_cfg.feature_options, spec.labels)
    device = pick_device(train_cfg.device, dist.local_rank)
    teacher.to(device)
    weights = Weights(cfg.alpha, cfg.hidden_weight, cfg.attention_weight, cfg.temperature,
                      "mse" if spec.kind == "regress" else cfg.soft_loss)
    targets, seconds = None, 0.0
    if cfg.alpha > 0:
        started = time.perf_counter()
        targets = feature_logits(teacher, features, cfg.teacher_batch_size, tok.pad_id)
        seconds = time.perf_counter() - started
        log.info("teacher labelled %d features in %.1f s", len(features), seconds)
    steps = DistillData(features, targets, weights, spec.kind, train_cfg.batch_size, train_cfg.accumulation,
                        train_cfg.epochs, train_cfg.seed, tok.pad_id, bucket_batches=train_cfg.bucket_batches)
    model = DistillModel(student, teacher if cfg.intermediate else None, weights, layer_map).to(device)
    key, spe = primary_key(spec.metric), steps.steps_per_epoch
    save_best = student_saver(student, tok, spec, cfg, train_cfg, run_dir / "best")
    keeper = BestKeeper(run_dir / "early_stopping.json", key, train_cfg.patience, save_best, dist.is_main,
                        fresh=not resume)
    picked = selected_on(mode, chosen, data, train_cfg)
    watched = dev if train_cfg.watch_dev else []
    evaluate = _evaluator(tok, spec, chosen, watched, train_cfg) if chosen or watched else None
    trainer = Trainer(model, steps, train_config(train_cfg, steps.total_steps, spe), run_dir, evaluate=evaluate,
                      run_config=to_dict(cfg), should_stop=keeper if chosen else None,
                      eval_also_at=lambda step: step % spe == 0,
                      eval_labels=eval_labels(picked, dev, data, train_cfg.watch_dev))
    if resume and keeper.state["stopped"]:
        done, stopped = keeper.state["history"][-1]["step"], True
        trainer.check_stopped(done)
    else:
        result = trainer.train(resume=resume)
        done, stopped = result.step, result.stopped_early
        if result.interrupted:
            raise TrainingInterrupted(f"{run_dir}: stopped by a signal after step {result.step} (checkpoint "
                                      f"{result.checkpoint}); run the same command again to resume it")
    if dist.is_main and not chosen:
        save_best()
    barrier()
    summary = {"task": spec.name, "teacher": str(cfg.teacher), "student": describe_student(cfg, student, layer_map, kept),
               "teacher_parameters": parameters(teacher), "seed": train_cfg.seed, "run_dir": str(run_dir),
               "best": str(run_dir / "best"), "steps": done, "steps_per_epoch": spe, "stopped_early": stopped,
               "best_step": keeper.state["best_step"] if chosen else done,
               "best_selection_score": keeper.state["best"] if chosen else None, "primary": key, "selection": mode,
               "selection_examples": len(chosen), "selected_on": picked.to_dict() if picked else None,
               "losses": {"terms": weights.terms, "alpha": cfg.alpha, "temperature": cfg.temperature,
                          "soft_loss": weights.soft_loss, "hidden_weight": cfg.hidden_weight,
                          "attention_weight": cfg.attention_weight},
               "transfer_set": {**tset.counts, "features": len(features), "unlabeled_sources": list(cfg.unlabeled),
                                "augment": cfg.augment},
               "teacher_labelling_seconds": round(seconds, 2)}
    if dist.is_main:
        summary.update(final_predictions(run_dir, data, train_cfg, picked))
        write_json_atomic(run_dir / "metrics.json", summary)
        write_model_card(run_dir / "best", provenance(cfg, spec.name), metrics=summary)
    return summary


def describe_student(cfg: DistillConfig, student: Any, layer_map: list[int], kept: list[int] | None) -> dict:
    """What the student is, for the summary."""
    bcfg = student.backbone.cfg
    out = {"kind": cfg.student, "parameters": parameters(student), "family": student.family or "bert"}
    for name in ("num_layers", "hidden_size", "num_heads", "intermediate_size"):
        if hasattr(bcfg, name):
            out[name] = getattr(bcfg, name)
    if kept is not None:
        out["teacher_layers"] = kept
    if cfg.intermediate:
        out["layer_map"] = layer_map
    return out


def provenance(cfg: DistillConfig, task: str) -> Provenance:
    return Provenance(base_model=str(cfg.teacher), datasets=(task, *cfg.unlabeled) if task else tuple(cfg.unlabeled))


def student_saver(student: Any, tok: Any, spec: Any, cfg: DistillConfig, train_cfg: FinetuneConfig,
                  directory: Path):
    """Write the student as a task directory (+ tokenizer, labels, feature settings), atomically."""

    def save() -> None:
        with atomic_dir(directory) as tmp:
            save_task_model(student, tmp, tok, list(spec.labels), provenance=provenance(cfg, spec.name),
                            label_names=spec.names)
            keep_sentence_files(cfg.teacher, tmp)  # only when the student is as wide as the teacher
            save_settings(tmp, train_cfg.feature_options, train_cfg.span_options,
                          {"task": spec.name, "metric": spec.metric, "finetune": to_dict(train_cfg),
                           "distill": to_dict(cfg)})

    return save


def run_seeds(cfg: DistillConfig, seeds: list[int], resume: bool = True, data: TaskData | None = None) -> dict:
    """One run per seed in ``<run_dir>/seed-N``; ``<run_dir>/summary.json`` holds each split's
    metrics over the seeds (mean, sample std, values), as ``finetune --seeds`` writes it."""
    from muppets.transfer.finetune import seed_summary

    root = run_dir_of(cfg, teacher_settings(cfg))
    runs = [run(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=s, run_dir=str(root / f"seed-{s}"))),
                resume, data) for s in seeds]
    summary: dict[str, Any] = {"task": runs[0]["task"], "teacher": runs[0]["teacher"], "student": runs[0]["student"],
                               **seed_summary(seeds, runs)}
    if init_distributed().is_main:
        write_json_atomic(root / "summary.json", summary)
    return summary
