"""Feature-based transfer: a frozen backbone's per-word layers + ScalarMix + a BiLSTM task model.

``muppets features sst2 --model runs/elmo-small --layers mix`` runs :func:`run`:

1. read the task (classify tasks: the sentence split on whitespace — SST-2 and MR come
   tokenised; tag tasks: the CoNLL tokens);
2. embed every split once with the frozen backbone and cache the vectors in ``cache_dir``
   (:mod:`muppets.transfer.feature_cache`), so later runs on the same model, task and layers —
   other seeds, other task-model settings — start at once;
3. train a :class:`~muppets.transfer.feature_models.FeatureTaskModel` with the shared
   :class:`~muppets.train.Trainer` (length-bucketed epochs, checkpoints, exact resume), scoring
   the selection data at every epoch end (:mod:`~muppets.transfer.selection`: by default a
   stratified 10% slice of train; dev only when a labelled test split is what is reported);
   the best model is kept (``<run_dir>/best``) and training stops after ``patience``
   evaluations without improvement;
4. reload ``best/``, predict dev and test; write ``metrics.json`` (SST-2: dev accuracy;
   CoNLL-2003: dev and test entity F1, by the task's own metric), ``predictions.jsonl`` and,
   for a mix, the learned weights (``mix_weights.json`` and a bar chart ``mix_weights.png``).

``layers`` picks what the task model reads (Devlin et al. 2019, Table 7; Peters et al. 2018):

* ``mix`` — every layer, ScalarMix-ed with weights learned for the task;
* ``last`` — the top layer; ``N`` — layer ``N`` alone (0 = embeddings / ELMo's token layer;
  negative counts from the top);
* ``last4sum`` / ``last4cat`` — the last four layers summed / concatenated.

``static=FILE`` concatenates static word vectors to the backbone's (ELMo's ``[x_k; ELMo_k]``).
A static model (word2vec, GloVe, NNLM) has one layer: ``layers`` does not apply.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from muppets.config import load_typed, to_dict, write_json_atomic
from muppets.errors import ConfigError, DataError, TrainingInterrupted
from muppets.tasks.spec import TaskData, TaskSpec
from muppets.train import TrainConfig, Trainer, seed_everything
from muppets.train.checkpoint import KeepCheckpoints, checkpoints_kept
from muppets.train.device import to_device
from muppets.train.trackers import check_reporting
from muppets.transfer.batching import IGNORE, EpochData, eval_batches
from muppets.transfer.embedders import POOLING_CHOICES
from muppets.transfer.feature_cache import LAYER_MODES, FeatureSource, is_int
from muppets.transfer.feature_models import (FeatureModelConfig, FeatureTaskModel, load_feature_model,
                                             save_feature_model)
from muppets.transfer.finetune import (BestKeeper, TaskSection, gold_of, load_task_data, mean_std,
                                       prediction_record, primary_key, score, scored_split, seed_provenance,
                                       write_jsonl)
from muppets.transfer.report import Scored
from muppets.transfer.selection import SELECTIONS, example_groups, resolve_mode, select

log = logging.getLogger(__name__)

@dataclass
class FeatureConfig:
    task: TaskSection = field(default_factory=TaskSection)
    model: str = "minilm"  # backbone: HF BERT/GPT dir, minilm, ELMo/NNLM/word2vec run, or a vector file
    layers: str = "mix"  # mix | last | last4sum | last4cat | N (one layer; negative = from the top)
    static: str = ""  # word-vector file (or word2vec/NNLM run) concatenated to the backbone's vectors
    pooling: str = "auto"  # sub-word models: auto (last piece for GPT, first for BERT) | first | mean | last
    oov: str = "zero"  # static vectors: an unknown word gets zeros (counted) | error
    run_dir: str = ""  # "" = runs/features/<task>-<model>-<layers>[-static]
    cache_dir: str = "runs/features/cache"  # embedded splits, shared by every run
    cache_dtype: str = "float16"  # float16 (half the memory) | float32
    embed_batch_size: int = 32  # sentences per backbone forward pass
    layer_norm: bool = False  # mix: normalise each layer before mixing (ELMo's option)
    mix_l2: float = 0.0  # mix: ELMo's lambda * |w|^2 on the mix logits (large: near the average; 0 = off)
    hidden: int = 128  # LSTM units per direction
    lstm_layers: int = 1  # stacked BiLSTM layers
    dropout: float = 0.3  # on the input vectors and before the output layer
    pool: str = "max"  # classify: max | mean over the BiLSTM states
    crf: bool = True  # tag: CRF output layer (else per-word softmax)
    batch_size: int = 32  # sentences per step
    eval_batch_size: int = 128  # sentences per prediction batch
    epochs: int = 10  # passes over the training set
    lr: float = 1e-3  # AdamW learning rate
    schedule: str = "constant"  # constant | linear | cosine (after no warmup)
    weight_decay: float = 0.0  # AdamW decoupled weight decay (matrices only)
    clip_grad_norm: float = 5.0  # clip the gradient norm (0 = off)
    patience: int = 3  # stop after this many evaluations without a better selection metric (0 = never)
    selection: str = "auto"  # what chooses the best model / stops early, never the reported split: auto | train-slice | dev | last (muppets.transfer.selection)
    selection_fraction: float = 0.1  # train-slice: share of the training sentences held out to select on (stratified by label)
    selection_seed: int = 1234  # train-slice: which sentences are held out (the same for every run seed)
    watch_dev: bool = False  # also score dev at every evaluation, logged as dev/<metric> only (never used to select)
    eval_every: int = 0  # also evaluate every N steps (0 = at epoch ends)
    keep_checkpoints: KeepCheckpoints = 1  # trainer checkpoints kept, newest first: 1 = the last (it resumes the run; the best model is best/), N, or all
    seed: int = 1  # task-model initialisation, dropout and batch order
    max_train_examples: int = 0  # only the first N training sentences (0 = all)
    max_eval_examples: int = 0  # only the first N dev/test sentences (0 = all)
    threads: int = 0  # torch CPU threads (0 = leave as is)
    device: str = "cpu"  # cpu | cuda:N (backbone and task model)
    log_every: int = 50  # console log every N steps
    progress: bool = True  # progress bars (on a TTY)
    report_to: list[str] = field(default_factory=list)  # trackers besides log.jsonl: tensorboard | mlflow | wandb (muppets.train.trackers)
    tracking_uri: str = ""  # mlflow's local store: a directory, file: URI, or sqlite: URI (full mlflow package) ("" = run_dir/mlruns)

    def __post_init__(self) -> None:
        check_reporting(self.report_to, self.tracking_uri)
        checks = [("layers", self.layers in LAYER_MODES or is_int(self.layers)),
                  ("pooling", self.pooling in POOLING_CHOICES), ("cache_dtype", self.cache_dtype in ("float16", "float32")),
                  ("epochs", self.epochs >= 1), ("batch_size", self.batch_size >= 1),
                  ("eval_batch_size", self.eval_batch_size >= 1), ("embed_batch_size", self.embed_batch_size >= 1),
                  ("patience", self.patience >= 0), ("eval_every", self.eval_every >= 0),
                  ("mix_l2", self.mix_l2 >= 0 and (self.mix_l2 == 0 or self.layers == "mix")),
                  ("selection", self.selection in SELECTIONS),
                  ("selection_fraction", 0.0 < self.selection_fraction < 1.0)]
        for name, ok in checks:
            if not ok:
                raise ConfigError(f"{name}: invalid value {getattr(self, name)!r}", key=name)
        checkpoints_kept(self.keep_checkpoints)


def load_config(path: str | Path | None, overrides: Sequence[str]) -> FeatureConfig:
    """YAML/JSON file (optional) + dotted ``key=value`` overrides, type-checked."""
    return load_typed(FeatureConfig, path, overrides)


# ----------------------------------------------------------------------------- splits and batches


def sentence_words(spec: TaskSpec, example: Any) -> list[str]:
    """The words a task model reads: CoNLL tokens, or the text split on whitespace."""
    if spec.kind == "tag":
        return list(example.tokens)
    return example.text.split()


@dataclass
class SplitFeatures:
    """One split ready for the task model: examples, per-sentence ``(K, n, D)`` features, optional
    ``(1, n, E)`` extra vectors and label ids (None when unlabelled)."""

    examples: list
    features: list[np.ndarray]
    extra: list[np.ndarray] | None = None
    labels: list | None = None

    @property
    def lengths(self) -> list[int]:
        return [f.shape[1] for f in self.features]

    def subset(self, indices: Sequence[int]) -> SplitFeatures:
        """The sentences ``indices`` of this split, in that order."""
        pick = lambda xs: None if xs is None else [xs[i] for i in indices]  # noqa: E731
        return SplitFeatures(pick(self.examples), pick(self.features), pick(self.extra), pick(self.labels))

    def batch(self, indices: Sequence[int], with_labels: bool = True) -> dict[str, torch.Tensor]:
        """``features (B, K, T, D)`` float32, ``attention_mask (B, T)``, ``extra (B, T, E)``, ``labels``."""
        rows = [self.features[i] for i in indices]
        T = max(r.shape[1] for r in rows)
        K, _, D = rows[0].shape
        feats = np.zeros((len(rows), K, T, D), np.float32)
        mask = np.zeros((len(rows), T), np.int64)
        for b, r in enumerate(rows):
            feats[b, :, : r.shape[1]] = r
            mask[b, : r.shape[1]] = 1
        out = {"features": torch.from_numpy(feats), "attention_mask": torch.from_numpy(mask)}
        if self.extra is not None:
            extra = np.zeros((len(rows), T, self.extra[0].shape[-1]), np.float32)
            for b, i in enumerate(indices):
                extra[b, : self.extra[i].shape[1]] = self.extra[i][0]
            out["extra"] = torch.from_numpy(extra)
        if with_labels and self.labels is not None:
            out["labels"] = _label_tensor([self.labels[i] for i in indices], T)
        return out


def _label_tensor(labels: list, T: int) -> torch.Tensor:
    if isinstance(labels[0], list):  # tag ids per word -> (B, T), -100 at padding
        out = torch.full((len(labels), T), IGNORE, dtype=torch.long)
        for b, ids in enumerate(labels):
            out[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        return out
    return torch.tensor(labels, dtype=torch.long)


def label_ids(spec: TaskSpec, examples: Sequence[Any]) -> list | None:
    """Label indices of ``spec.labels`` (per word for tag tasks); None when unlabelled."""
    index = {name: i for i, name in enumerate(spec.labels)}
    gold = [ex.tags if spec.kind == "tag" else ex.label for ex in examples]
    if any(g is None for g in gold):
        return None

    def one(value: Any, ex: Any) -> int:
        if str(value) not in index:
            raise DataError(f"label not in the task's label set {spec.labels}", path=ex.source, value=value)
        return index[str(value)]

    return [[one(t, ex) for t in g] if spec.kind == "tag" else one(g, ex) for g, ex in zip(gold, examples)]


@dataclass
class _Row:
    length: int  # what EpochData buckets by


class FeatureEpochData(EpochData):
    """:class:`~muppets.transfer.batching.EpochData` over a split's cached features."""

    def __init__(self, split: SplitFeatures, kind: str, batch_size: int, epochs: int, seed: int,
                 mix_l2: bool = False) -> None:
        super().__init__([_Row(n) for n in split.lengths], kind, batch_size, 1, epochs, seed, pad_id=0)
        self.split, self.mix_l2 = split, mix_l2

    def normalizers(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """The task's units, and one unit of the mix penalty per micro-batch (so that the
        trainer's mean over an update, any accumulation or world size, is ``lambda * |w|^2``)."""
        units = super().normalizers(batch)
        return {**units, "mix_l2": 1.0} if self.mix_l2 else units

    def collate(self, indices: list[int]) -> dict[str, torch.Tensor]:
        return self.split.batch(indices)


def predict_split(model: FeatureTaskModel, split: SplitFeatures, spec: TaskSpec, batch_size: int) -> list:
    """Label strings (tag tasks: one list per sentence), in the split's order."""
    device = next(model.parameters()).device
    out: list = [None] * len(split.examples)
    was_training = model.training
    model.eval()
    try:
        for index in eval_batches(split.lengths, batch_size):
            batch = to_device(split.batch(index, with_labels=False), device)
            for i, ids in zip(index, model.predict(**batch)):
                out[i] = [spec.labels[t] for t in ids] if spec.kind == "tag" else spec.labels[ids]
    finally:
        model.train(was_training)
    return out


# ----------------------------------------------------------------------------- the run


@dataclass
class _Prepared:
    """Everything a run builds before training."""

    spec: TaskSpec
    splits: dict[str, SplitFeatures]
    model_cfg: FeatureModelConfig
    backbone: dict  # the main source's metadata (kind, layers, combine, counts per split)
    static: dict | None  # the concatenated static vectors' metadata
    totals: dict[str, int] = field(default_factory=dict)  # examples per split of the task, before max_*_examples


def _limit(examples: list, n: int) -> list:
    return examples[:n] if n > 0 else examples


def prepare(cfg: FeatureConfig, data: TaskData) -> _Prepared:
    """Embed (or read from the cache) every split with the backbone and the static vectors."""
    spec = data.spec
    if spec.kind not in ("classify", "tag"):
        raise ConfigError(f"task {spec.name!r} is a {spec.kind} task; feature-based transfer runs "
                          "classify and tag tasks")
    settings = dict(cache_dir=cfg.cache_dir, pooling=cfg.pooling, oov=cfg.oov, dtype=cfg.cache_dtype,
                    batch_size=cfg.embed_batch_size, device=cfg.device, progress=cfg.progress)
    main = FeatureSource(cfg.model, cfg.layers, **settings)
    static = FeatureSource(cfg.static, "0", **settings) if cfg.static else None
    splits, meta, static_meta = {}, {}, None
    weak = [ex for ex in data.splits.get("train", []) if getattr(ex, "probs", None) is not None]
    if weak:
        raise ConfigError(f"{weak[0].source}: training examples with probs (soft labels, {len(weak)} of them): "
                          "`muppets features` trains on hard labels only; use `muppets finetune` "
                          "(weak_labels=soft|hard), or drop the probs column")
    for name in ("train", "dev", "test"):
        limit = cfg.max_train_examples if name == "train" else cfg.max_eval_examples
        examples = _limit(data.splits.get(name, []), limit)
        if not examples:
            continue
        words = [sentence_words(spec, ex) for ex in examples]
        features, meta = _split_meta(main.features(words, f"{spec.name}-{name}"), name, meta)
        extra = None
        if static is not None:
            extra, static_meta = _split_meta(static.features(words, f"{spec.name}-{name}"), name, static_meta)
        splits[name] = SplitFeatures(examples, features, extra, label_ids(spec, examples))
        log.info("%s: %d sentences; backbone counts %s", name, len(examples), meta["counts"][name])
    if "train" not in splits or splits["train"].labels is None:
        raise ConfigError(f"task {spec.name!r} has no labelled train split")
    K, _, D = splits["train"].features[0].shape
    model_cfg = FeatureModelConfig(
        kind=spec.kind, num_labels=len(spec.labels), num_layers=K, dim=D, combine=meta["combine"],
        layer_norm=cfg.layer_norm, extra_dim=splits["train"].extra[0].shape[-1] if static else 0,
        hidden=cfg.hidden, lstm_layers=cfg.lstm_layers, dropout=cfg.dropout, pool=cfg.pool, crf=cfg.crf,
        mix_l2=cfg.mix_l2)
    return _Prepared(spec, splits, model_cfg, meta, static_meta, data.sizes())


COUNTS = ("words", "oov", "empty_words")  # what an embedder counts (per split in the metadata)


def _split_meta(result: tuple[list[np.ndarray], dict], split: str, so_far: dict | None) -> tuple[list, dict]:
    """The features, and the source's metadata with this split's counts under ``counts[split]``."""
    features, meta = result
    merged = {k: v for k, v in meta.items() if k not in COUNTS and k not in ("num_sentences", "num_words", "shape")}
    merged["counts"] = {**(so_far or {}).get("counts", {}), split: {k: meta[k] for k in COUNTS if k in meta}}
    return features, merged


def _train_config(cfg: FeatureConfig, steps: int, steps_per_epoch: int) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=cfg.batch_size, lr=cfg.lr, weight_decay=cfg.weight_decay,
                       schedule=cfg.schedule, clip_grad_norm=cfg.clip_grad_norm, eval_every=cfg.eval_every,
                       checkpoint_every=cfg.eval_every or steps_per_epoch, keep_checkpoints=cfg.keep_checkpoints,
                       log_every=cfg.log_every, seed=cfg.seed, report_to=list(cfg.report_to),
                       tracking_uri=cfg.tracking_uri, progress=cfg.progress,
                       threads=cfg.threads)


def mix_metrics(model: FeatureTaskModel) -> dict[str, float]:
    """``mix_w0 … mix_w{K-1}`` and ``mix_gamma`` of a mixing model ({} otherwise), for the logs."""
    mix = model.combiner.weights()
    if mix is None:
        return {}
    return {**{f"mix_w{k}": w for k, w in enumerate(mix["weights"])}, "mix_gamma": mix["gamma"]}


def _evaluator(spec: TaskSpec, chosen: SplitFeatures | None, watched: SplitFeatures | None,
               cfg: FeatureConfig):
    """Trainer callback: the task metric on the sentences that select the model, on ``watched``
    as ``dev/<metric>`` (logged only), and the current mix weights (so they are logged)."""
    parts = [(prefix, split) for prefix, split in (("", chosen), ("dev/", watched)) if split is not None]

    def evaluate(model: FeatureTaskModel) -> dict[str, float]:
        out = mix_metrics(model)
        for prefix, split in parts:
            metrics = score(spec, split.examples, predict_split(model, split, spec, cfg.eval_batch_size))
            out.update({prefix + k: v for k, v in metrics.items()})
        return out

    return evaluate


def _selection(p: _Prepared, cfg: FeatureConfig) -> tuple[SplitFeatures, SplitFeatures | None, str, Scored | None]:
    """``(sentences trained on, sentences that select or None, mode, what selects)``, by
    :mod:`muppets.transfer.selection` (dev is reported, not selected on, unless a test is)."""
    train, dev, test = (p.splits.get(name) for name in ("train", "dev", "test"))
    has_dev, has_test = (s is not None and s.labels is not None for s in (dev, test))
    mode = resolve_mode(cfg.selection, has_dev, has_test, cfg.epochs, cfg.eval_every)
    golds = [gold_of(p.spec.kind, ex) for ex in train.examples]
    sel = select(mode, p.spec.kind, golds, len(dev.examples) if has_dev else 0, cfg.selection_fraction,
                 cfg.selection_seed, example_groups(train.examples))
    chosen = {"train": train, "dev": dev}.get(sel.split)
    on = {"train": Scored("train-slice", len(sel.select), len(train.examples), True, "train"),
          "dev": Scored("dev", len(sel.select), p.totals.get("dev", len(sel.select)), True)}.get(sel.split)
    return train.subset(sel.train), chosen.subset(sel.select) if chosen is not None else None, sel.mode, on


def model_stem(name: str) -> str:
    """A short name for a model argument: ``runs/elmo-small/final`` -> ``elmo-small``.

    >>> model_stem("runs/elmo-small/final"), model_stem("runs/w2v/vectors.bin"), model_stem("minilm")
    ('elmo-small', 'w2v', 'minilm')
    """
    path = Path(name)
    return (path.parent.name if path.name in ("final", "vectors.bin", "embeddings.bin") else path.stem) or name


def default_run_dir(cfg: FeatureConfig) -> Path:
    """``runs/features/<task>-<model>-<layers>[-<static>]``."""
    task = cfg.task.name or Path(str(next(iter(cfg.task.files.values()), "task"))).stem
    parts = [task, model_stem(cfg.model), cfg.layers] + ([model_stem(cfg.static)] if cfg.static else [])
    return Path("runs") / "features" / "-".join(parts)


def run(cfg: FeatureConfig, resume: bool = True, data: TaskData | None = None,
        prepared: _Prepared | None = None) -> dict:
    """Embed (cached), train, keep ``best/``, score dev/test; returns (and writes) the summary.
    ``prepared`` (from :func:`prepare` with the same settings) skips reading the features again."""
    run_dir = Path(cfg.run_dir) if cfg.run_dir else default_run_dir(cfg)
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    p = prepared or prepare(cfg, data or load_task_data(cfg.task))
    seed_everything(cfg.seed)  # the task model's initialisation
    model = FeatureTaskModel(p.model_cfg).to(cfg.device)
    train, chosen, mode, chosen_on = _selection(p, cfg)
    steps = FeatureEpochData(train, p.spec.kind, cfg.batch_size, cfg.epochs, cfg.seed, mix_l2=cfg.mix_l2 > 0)
    spe = steps.steps_per_epoch
    dev = p.splits.get("dev")
    watched = dev if cfg.watch_dev and dev is not None and dev.labels is not None else None
    extra = {"task": p.spec.name, "labels": list(p.spec.labels), "backbone": p.backbone, "static": p.static}

    def save_best() -> None:
        save_feature_model(model, run_dir / "best", extra)

    keeper = BestKeeper(run_dir / "early_stopping.json", primary_key(p.spec.metric), cfg.patience, save_best,
                        is_main=True, fresh=not resume)
    evaluate = _evaluator(p.spec, chosen, watched, cfg) if chosen is not None or watched is not None else None
    labels = {"": chosen_on.describe()} if chosen_on is not None else {}
    if watched is not None:
        labels["dev/"] = Scored("dev", len(watched.examples), p.totals.get("dev", 0)).describe()
    trainer = Trainer(model, steps, _train_config(cfg, steps.total_steps, spe), run_dir,
                      evaluate=evaluate, run_config=to_dict(cfg),
                      should_stop=keeper if chosen is not None else None,
                      eval_also_at=lambda step: step % spe == 0, eval_labels=labels)
    if resume and keeper.state["stopped"]:
        done, stopped = keeper.state["history"][-1]["step"], True
        trainer.check_stopped(done)  # its best/ and metrics must not be taken for these settings'
        log.info("%s stopped early before (best step %s); not training again", run_dir, keeper.state["best_step"])
    else:
        result = trainer.train(resume=resume)
        done, stopped = result.step, result.stopped_early
        if result.interrupted:  # not finished: no metrics.json, so no caller takes it for a result
            raise TrainingInterrupted(f"{run_dir}: stopped by a signal after step {result.step} (checkpoint "
                                      f"{result.checkpoint}); run the same command again to resume it")
    if chosen is None:
        log.info("selection=%s: best/ is the model after the last step", mode)
        save_best()
    summary = {"task": p.spec.name, "model": cfg.model, "layers": cfg.layers, "static": cfg.static or None,
               "seed": cfg.seed, "run_dir": str(run_dir), "steps": done, "steps_per_epoch": spe,
               "stopped_early": stopped, "best_step": keeper.state["best_step"] if chosen is not None else done,
               "selection": mode, "selection_examples": len(chosen.examples) if chosen is not None else 0,
               "selected_on": chosen_on.to_dict() if chosen_on is not None else None,
               "train_examples": len(train.examples), "backbone": p.backbone, "static_vectors": p.static}
    summary.update(_final(run_dir, p, cfg, chosen_on))
    write_json_atomic(run_dir / "metrics.json", summary)
    return summary


def _final(run_dir: Path, p: _Prepared, cfg: FeatureConfig, chosen_on: Scored | None = None) -> dict:
    """Reload ``best/``; score dev and test (with what they scored, ``scored_on``, and
    ``notes``); write predictions and the learned mix (json + png)."""
    best, _ = load_feature_model(run_dir / "best")
    best.to(cfg.device)
    out: dict[str, Any] = {"scored_on": {}, "notes": []}
    lines = []
    for name in ("dev", "test"):
        split = p.splits.get(name)
        if split is None:
            continue
        preds = predict_split(best, split, p.spec, cfg.eval_batch_size)
        out[name] = score(p.spec, split.examples, preds)
        out["scored_on"][name], note = scored_split(p.spec, name, split.examples, preds,
                                                    p.totals.get(name, len(split.examples)), chosen_on)
        out["notes"] += [note] if note else []
        lines += [prediction_record(p.spec.kind, name, ex, pred) for ex, pred in zip(split.examples, preds)]
    write_jsonl(run_dir / "predictions.jsonl", lines)
    mix = best.combiner.weights()
    if mix is not None:
        from muppets.analysis.layer_weights import layer_labels, plot_layer_weights

        mix["layers"] = p.backbone["layers"]
        mix["labels"] = layer_labels(p.backbone["kind"], mix["layers"])
        write_json_atomic(run_dir / "mix_weights.json", mix)
        log.info("learned mix for %s: %s (gamma %.3f)", p.spec.name,
                 ", ".join(f"{n} {w:.3f}" for n, w in zip(mix["labels"], mix["weights"])), mix["gamma"])
        panel = {model_stem(cfg.model): (mix["labels"], mix["weights"], mix["gamma"])}
        mix["plot"] = str(plot_layer_weights(panel, run_dir / "mix_weights.png", title=p.spec.name))
        out["mix"] = mix
    return out


def run_seeds(cfg: FeatureConfig, seeds: Sequence[int], resume: bool = True, data: TaskData | None = None) -> dict:
    """One run per seed in ``<run_dir>/seed-N`` (the features are embedded once); ``summary.json``
    has every metric's mean and sample standard deviation and the mean learned mix."""
    root = Path(cfg.run_dir) if cfg.run_dir else default_run_dir(cfg)
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    prepared = prepare(cfg, data or load_task_data(cfg.task))  # the seed does not change the features
    runs = [run(dataclasses.replace(cfg, seed=s, run_dir=str(root / f"seed-{s}")), resume, prepared=prepared)
            for s in seeds]
    summary: dict[str, Any] = {"task": runs[0]["task"], "model": cfg.model, "layers": cfg.layers,
                               "static": cfg.static or None, "seeds": list(seeds), "runs": [r["run_dir"] for r in runs],
                               **seed_provenance(seeds, runs)}
    for split in ("dev", "test"):
        names = sorted({k for r in runs for k in r.get(split, {})})
        if names:
            summary[split] = {k: mean_std([r[split][k] for r in runs if k in r.get(split, {})]) for k in names}
    if "mix" in runs[0]:
        weights = np.mean([r["mix"]["weights"] for r in runs], axis=0)
        summary["mix"] = {"labels": runs[0]["mix"]["labels"], "weights": weights.tolist(),
                          "gamma": float(np.mean([r["mix"]["gamma"] for r in runs])),
                          "per_seed": [r["mix"]["weights"] for r in runs]}
    write_json_atomic(root / "summary.json", summary)
    return summary
