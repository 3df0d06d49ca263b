"""The one training loop behind every pretraining objective and every fine-tuning recipe.

A step is one optimizer update. For update number ``step + 1`` the trainer asks the data for
this rank's micro-batches, runs forward/backward on each (DDP syncs gradients only on the
last), clips, checks that loss and gradient norm are finite, sets the learning rate from the
schedule, and steps AdamW. Then it logs, evaluates and checkpoints when due.

**Loss normalisation.** A model returns, per loss term, the *sum* over its units
(``out.loss_sums["mlm"]`` = summed token cross-entropy); the data says how many units each
micro-batch holds (``data.normalizers(batch)["mlm"]`` = masked tokens). The trainer adds the
counts of all micro-batches of all ranks into ``N_k`` and backpropagates
``sum_k loss_sums[k] / N_k`` (times the world size, because DDP averages gradients), so an
update equals that of one big batch with per-term mean losses, whatever the accumulation,
world size, or number of masked tokens per micro-batch. Terms with ``N_k = 0`` in a step
contribute nothing (their sum is 0; the divisor is clamped to 1).

**Determinism.** :class:`StepData` must return the same tensors for the same
``(step, rank, world)``; the data position is then just the step, which makes resume exact
and a 2-process DDP run equal to one process with the same global batch.
"""

from __future__ import annotations

import logging
import math
import random
import signal
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from muppets.config import atomic_dir, to_dict, write_json_atomic
from muppets.errors import CheckpointError, CheckpointMismatch, ConfigError, TrainingDiverged
from muppets.heap import HeapTrimmer
from muppets.train.checkpoint import (
    STATE_FILE,
    RngState,
    TrainerState,
    capture_rng,
    KeepCheckpoints,
    checkpoint_name,
    checkpoints_kept,
    latest_checkpoint,
    load_checkpoint,
    preserved_rng,
    read_state,
    restore_rng,
    save_checkpoint,
)
from muppets.train.device import to_device
from muppets.train.distributed import all_gather, all_reduce_sum, any_rank, barrier, init_distributed
from muppets.train.logger import RunLogger, read_log
from muppets.train.optim import build_optimizer, is_clipped
from muppets.train.plots import plan_panels, write_run_plot
from muppets.train.precision import PRECISIONS, AutoPrecision, auto_probes, autocast, resolve_precision
from muppets.train.progress import run_eta, training_bar
from muppets.train.rundir import (
    CONFIG_FILE,
    changed_settings,
    check_fresh_start,
    check_resume,
    describe,
    effective_changes,
    keep_previous_config,
    run_lock,
    run_name,
    saved_config,
)
from muppets.train.schedule import check_schedule, lr_factor, warmup_warning
from muppets.train.signals import stop_signal_handler
from muppets.train.trackers import NONE, TrackedRun, check_reporting, open_trackers

logger = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    """How to train: optimizer, schedule, batch geometry, and the cadence of logs and saves."""

    steps: int = 1000  # optimizer steps in total
    batch_size: int = 32  # GLOBAL sequences per optimizer step (all ranks, all micro-batches)
    accumulation: int = 1  # micro-batches per optimizer step (per rank)
    lr: float = 1e-4  # peak learning rate (after warmup)
    weight_decay: float = 0.01  # decoupled; not applied to biases, norm weights, any 1-D param
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # AdamW beta1, beta2
    eps: float = 1e-6  # AdamW epsilon
    warmup_steps: int = 0  # linear warmup from 0 to lr over this many steps
    schedule: str = "linear"  # "linear" | "cosine" | "constant" decay after warmup to min_lr_ratio*lr
    min_lr_ratio: float = 0.0  # final learning rate as a fraction of lr
    clip_grad_norm: float = 1.0  # clip the global gradient norm to this; 0 disables
    eval_every: int = 0  # evaluate every N steps; 0 = only at the end
    checkpoint_every: int = 0  # checkpoint every N steps; 0 = only at the end
    keep_checkpoints: KeepCheckpoints = 1  # checkpoints kept, newest first: 1 = the last (it resumes the run), N, or all
    log_every: int = 10  # console + trackers every N steps (log.jsonl gets every step)
    seed: int = 0  # seeds torch/numpy/random at the start of a fresh run (plus the rank)
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])  # trackers besides log.jsonl: tensorboard | mlflow | wandb; [] or [none] = none (muppets.train.trackers)
    tracking_uri: str = ""  # mlflow's local store: a directory, file: URI, or sqlite: URI (full mlflow package) ("" = run_dir/mlruns)
    tensorboard: bool | None = None  # older configs' switch, read into report_to (true adds tensorboard, false removes it)
    progress: bool = True  # tqdm bar with loss, tokens/s, ETA of the run (main rank, on a TTY)
    plot: bool = True  # redraw run_dir/training_curves.png at every evaluation and at the end
    threads: int = 0  # torch.set_num_threads; 0 = leave as is
    max_minutes: float = 0.0  # wall-clock budget of one train() call: evaluate, checkpoint, stop; 0 = none
    precision: str = "fp32"  # fp32 | bf16 (autocast forward, fp32 weights) | auto (bf16 where native and measured faster; muppets.train.precision)
    trim_heap_seconds: float = 30.0  # return freed heap pages to the system (malloc_trim, or tcmalloc's release) at most this often, between steps; 0 = never (muppets.heap)

    def __post_init__(self) -> None:
        check_schedule(self.schedule, self.min_lr_ratio)
        check_reporting(self.report_to, self.tracking_uri)
        if self.tensorboard is not None:  # one setting says where a run reports: report_to
            others = [name for name in self.report_to if name not in ("tensorboard", NONE)]
            self.report_to = others + ["tensorboard"] if self.tensorboard else others
            self.tensorboard = None
        checks = [
            ("steps", self.steps >= 0), ("batch_size", self.batch_size >= 1),
            ("accumulation", self.accumulation >= 1), ("lr", self.lr >= 0),
            ("weight_decay", self.weight_decay >= 0), ("eps", self.eps > 0),
            ("betas", len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas)),
            ("warmup_steps", self.warmup_steps >= 0), ("clip_grad_norm", self.clip_grad_norm >= 0),
            ("eval_every", self.eval_every >= 0), ("checkpoint_every", self.checkpoint_every >= 0),
            ("log_every", self.log_every >= 0), ("threads", self.threads >= 0),
            ("precision", self.precision in PRECISIONS), ("trim_heap_seconds", self.trim_heap_seconds >= 0),
        ]
        for name, ok in checks:
            if not ok:
                raise ConfigError(f"train.{name}: invalid value {getattr(self, name)!r}", key=name)
        checkpoints_kept(self.keep_checkpoints)


class LossOutput(Protocol):
    """What the model's forward must return (any object with this attribute)."""

    loss_sums: dict[str, torch.Tensor]  # per loss term, the SUM over its units in the micro-batch


class StepData(Protocol):
    """Deterministic batches: the same ``(step, rank, world)`` always gives the same tensors."""

    def micro_batches(self, step: int, rank: int, world: int) -> list[dict[str, torch.Tensor]]:
        """This rank's share of update ``step`` (0-based), as ``accumulation`` micro-batches."""
        ...

    def normalizers(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """Per loss term, how many units this micro-batch holds (``{"mlm": n_masked, "nsp": B}``)."""
        ...

    def num_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        """Real (non-padding) tokens in this micro-batch: logged per step as ``real_tokens``
        (summed over micro-batches and ranks) and behind tokens/s."""
        ...


@dataclass
class TrainResult:
    """What :meth:`Trainer.train` returns."""

    step: int  # optimizer updates done in total (including those before a resume)
    losses: list[float]  # the loss of every step run by THIS call (steps step-len+1 .. step)
    last_eval: dict[str, float]  # the last evaluation's metrics ({} without an evaluate callback)
    checkpoint: Path | None  # the last checkpoint written (or resumed from)
    stopped_early: bool  # True when a SIGINT/SIGTERM, the max_minutes budget or should_stop ended training
    interrupted: bool = False  # True when that was a SIGINT/SIGTERM


@dataclass
class _StepStats:
    loss: float  # sum of the per-term global means
    terms: dict[str, float]  # per-term global means
    lr: float
    grad_norm: float  # before clipping
    tokens: int  # real (non-padding) tokens of the update, over all ranks
    seconds: float
    pass_seconds: float  # of which the forward/backward passes (what precision changes)


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), numpy and python ``random`` from one integer."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def _check_split(config: TrainConfig, world: int) -> None:
    if config.batch_size % (world * config.accumulation):
        raise ConfigError(
            f"train.batch_size={config.batch_size} is not divisible by world size {world} "
            f"x train.accumulation={config.accumulation}"
        )


class Trainer:
    """Trains ``model`` on ``data``; see the module docstring for the loss contract.

    Args:
        model: ``model(**batch)`` returns an object with ``loss_sums`` (see :class:`LossOutput`).
        data: a :class:`StepData`.
        config: the :class:`TrainConfig`.
        run_dir: ``config.json``, ``log.jsonl``, ``training_curves.png``, ``checkpoints/``,
            ``model/`` go here, and the trackers' ``tb/``, ``mlruns/``, ``wandb/``, ``trackers.json``.
        evaluate: called with the bare model in eval mode under ``no_grad`` (and without
            touching the training RNG) on every rank; returns ``{name: value}``.
        run_config: the resolved full config; saved as ``run_dir/config.json`` and in every
            checkpoint (default: ``{"train": <config>}``).
        save_model: optional export ``save_model(model, directory)``, called on the main rank
            when :meth:`train` returns normally or after a signal, into ``run_dir/model``
            (written to a temporary directory and renamed into place).
        should_stop: optional ``should_stop(step, metrics) -> bool``, called on every rank
            after each evaluation with its metrics (early stopping); when it returns True on
            any rank, training checkpoints and returns (``TrainResult.stopped_early``).
        eval_also_at: optional ``eval_also_at(step) -> bool``: further steps to evaluate at
            besides ``config.eval_every`` and the last step (e.g. every epoch end).
        step_extras: optional ``step_extras() -> {name: value}``, called after every update
            and added to that step's ``log.jsonl`` record (e.g. learned task weights).
        frozen: optional ``frozen(step) -> parameters`` left as they are by update ``step + 1``
            (``step`` = updates done so far): their gradients are dropped after the backward
            pass, before clipping, so AdamW neither moves nor decays them and their moments
            stay untouched (e.g. a fresh head trained alone before the encoder joins). A
            function of the step only, so a resumed run freezes exactly what the first did.
        draw: optional ``draw()``, called on the main rank whenever ``training_curves.png`` is
            redrawn (after each evaluation, unless ``config.plot`` is off) to redraw a picture
            of the caller's from ``log.jsonl`` (e.g. ``multitask.png``); it must not raise.
        after_training: keys of ``run_config`` that only steer what the caller does after the
            trained steps (multitask's MT-DNN second stage): a finished run may be asked again
            with them changed (:func:`~muppets.train.rundir.check_resume`).
        eval_labels: what ``evaluate`` scored, by metric-name prefix (``{"": "train-slice (692 of
            6,920 train examples, selected on)", "dev/": "dev (200 of 872 examples)"}``): named
            in the evaluation's log line and in ``training_curves.png``.
        baselines: what a baseline scores on the evaluated examples, by metric name (``{"mlm_accuracy":
            ("unigram: the most frequent token", 0.058)}``): a dashed line in that metric's panel of
            ``training_curves.png`` (:func:`~muppets.train.plots.add_baselines`).

    Under ``torchrun`` the constructor joins the process group (:func:`init_distributed`) and
    wraps the model in DistributedDataParallel; build the same model on every rank.
    """

    def __init__(
        self,
        model: nn.Module,
        data: StepData,
        config: TrainConfig,
        run_dir: Path,
        evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
        run_config: dict | None = None,
        save_model: Callable[[nn.Module, Path], None] | None = None,
        should_stop: Callable[[int, dict[str, float]], bool] | None = None,
        eval_also_at: Callable[[int], bool] | None = None,
        step_extras: Callable[[], dict[str, float]] | None = None,
        frozen: Callable[[int], Sequence[nn.Parameter]] | None = None,
        draw: Callable[[], object] | None = None,
        after_training: Collection[str] = (),
        eval_labels: Mapping[str, str] | None = None,
        baselines: Mapping[str, tuple[str, float]] | None = None,
    ) -> None:
        self.model, self.data, self.config = model, data, config
        self.run_dir = Path(run_dir)
        self.evaluate, self.save_model = evaluate, save_model
        self.should_stop, self.eval_also_at = should_stop, eval_also_at
        self.step_extras, self.frozen, self.draw = step_extras, frozen, draw
        self.after_training = frozenset(after_training)
        self.eval_labels = dict(eval_labels or {})
        self.baselines = dict(baselines or {})
        self.run_config = run_config if run_config is not None else {"train": to_dict(config)}
        self.dist = init_distributed()
        _check_split(config, self.dist.world)
        self.optimizer, self._param_names = build_optimizer(
            model, lr=config.lr, weight_decay=config.weight_decay, betas=config.betas, eps=config.eps
        )
        self._device = next(model.parameters()).device
        self._amp = resolve_precision(config.precision, self._device)
        self._auto: AutoPrecision | None = None  # precision=auto measured (native-bf16 CPU): chosen in _loop
        if config.precision == "auto" and auto_probes(self._device):
            self._amp = None
            world = self.dist.world  # every rank decides on the mean of the ranks' timings
            self._auto = AutoPrecision(
                agree=lambda v: (all_reduce_sum(torch.tensor(v, dtype=torch.float64)) / world).tolist())
        elif config.precision == "auto":
            logger.info("precision auto: %s", "bf16 autocast" if self._amp is not None else
                        "fp32 (no native bf16 on this CPU: emulated bf16 is slower)")
        self._net = self._wrap(model)
        self.step = 0
        self.tokens_seen = 0
        self.last_checkpoint: Path | None = None
        self._elapsed_before = 0.0
        self._started = time.perf_counter()
        self._stop_signal: int | None = None
        self._log = RunLogger(self.run_dir, enabled=False)
        self._bar: Any = None
        self._start_step = 0  # the step this train() call started from
        self._plotted_step: int | None = None  # the step training_curves.png was last drawn at

    @property
    def checkpoint_dir(self) -> Path:
        """``run_dir/checkpoints``."""
        return self.run_dir / "checkpoints"

    def _wrap(self, model: nn.Module) -> nn.Module:
        if self.dist.world <= 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.dist.local_rank] if self._device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    # ------------------------------------------------------------------ entry point

    def train(self, resume: bool | Path = True) -> TrainResult:
        """Train up to ``config.steps`` updates.

        Args:
            resume: True continues from ``run_dir``'s latest checkpoint if there is one (else
                starts fresh); a path names a checkpoint directory (or a run directory) to
                start from; False starts from the trainer's in-memory state.

        Raises:
            TrainingDiverged: a step's loss or gradient norm was not finite; that update was
                not applied and the message names the last good checkpoint.
            CheckpointError: the checkpoint to resume from is missing, incomplete or does not fit.
            RunDirError: another run holds ``run_dir`` (:func:`~muppets.train.rundir.run_lock`),
                or this one would overwrite what it holds.
        """
        with run_lock(self.run_dir, enabled=self.dist.is_main):
            return self._train(resume)

    def _train(self, resume: bool | Path) -> TrainResult:
        self._prepare(resume)
        try:
            if self.step >= self.config.steps:
                logger.info("already at step %d of %d; nothing to train", self.step, self.config.steps)
                return TrainResult(self.step, [], self._logged_evaluation(), self.last_checkpoint, False)
            warning = warmup_warning(self.config.steps, self.config.warmup_steps)
            if warning and self.dist.is_main:
                logger.warning(warning)
            with self._signal_handlers(), self._progress_bar():
                try:
                    return self._loop()
                finally:  # also after a divergence or a second signal: the picture shows why
                    self._plot()
        except BaseException:
            self._log.close(failed=True)
            raise
        finally:
            self._log.close()

    def _prepare(self, resume: bool | Path) -> None:
        """Threads, seeds, resume, config.json and the log, before the first step."""
        if self.config.threads > 0:
            torch.set_num_threads(self.config.threads)
        self._stop_signal = None
        path = self._resume_path(resume)
        self._agree_on_start(path)
        if path is None and self.step == 0 and self.dist.is_main:  # a failing rank ends the others (torchrun)
            check_fresh_start(self.run_dir, self.run_config, latest_checkpoint(self.run_dir))
        rng = self._restore(path) if path is not None else None
        self._log = self._run_logger()
        self._log.truncate_after(self.step)
        if self.dist.is_main:
            if path is not None:
                keep_previous_config(self.run_dir, self.run_config, self.step)
            write_json_atomic(self.run_dir / "config.json", self.run_config)
        if rng is not None:  # last, so that nothing above (e.g. importing a tracker) draws from it
            restore_rng(rng, self.dist.rank)
        elif self.step == 0:
            seed_everything(self.config.seed + self.dist.rank)
        self._net.train()

    def _run_logger(self) -> RunLogger:
        """The log, and on the main rank the trackers of ``report_to`` (imported now)."""
        if not self.dist.is_main:
            return RunLogger(self.run_dir, enabled=False)
        run = TrackedRun(self.run_dir, run_name(self.run_dir), self.step, self.config.tracking_uri)
        return RunLogger(self.run_dir, trackers=open_trackers(self.config.report_to, run), config=self.run_config)

    def _resume_path(self, resume: bool | Path) -> Path | None:
        if resume is False:
            return None
        if resume is True:
            found = latest_checkpoint(self.run_dir)
            if found is None:
                logger.info("no checkpoint in %s; starting a fresh run", self.checkpoint_dir)
            return found
        path = Path(resume)
        if not (path / STATE_FILE).is_file() and latest_checkpoint(path) is not None:
            return latest_checkpoint(path)
        return path

    def _agree_on_start(self, path: Path | None) -> None:
        """Under DDP, check that every rank starts from the same checkpoint (or none).

        Each rank looks for the run's latest checkpoint itself; on several machines that is
        only the same one when ``run_dir`` is on storage they all share. A rank that saw
        another (or none) would train a different model in lockstep with the others, so every
        rank raises instead, naming what each one found.

        Raises:
            CheckpointError: the ranks found different checkpoints.
        """
        if self.dist.world <= 1:
            return
        step = read_state(path).step if path is not None else -1
        found = [int(t.item()) for t in all_gather(torch.tensor([step], dtype=torch.int64))]
        if len(set(found)) > 1:
            seen = ", ".join(f"rank {r}: {'none' if s < 0 else f'step {s}'}" for r, s in enumerate(found))
            raise CheckpointError(f"the ranks would start from different checkpoints of {self.checkpoint_dir} "
                                  f"({seen}): every node must see the same run_dir, on storage they all share")

    def _restore(self, path: Path) -> RngState:
        """Load model, optimizer and counters from ``path``; return the RNG state to apply."""
        try:
            state, rng = load_checkpoint(path, self.model, self.optimizer, self._param_names)
        except CheckpointMismatch as error:
            raise self._misfit(Path(path), error) from error
        self.step, self.tokens_seen, self._elapsed_before = state.step, state.tokens_seen, state.elapsed_s
        self.last_checkpoint = Path(path)
        if state.world_size != self.dist.world:
            logger.warning(
                "%s was written by %d processes, resuming with %d: the data and updates are the same, "
                "per-rank random streams are not", path, state.world_size, self.dist.world,
            )
        changed = self._changed(state)
        check_resume(Path(path), self.step, self.config.steps, changed, self.after_training)
        logger.info("resumed from %s at step %d", path, self.step)
        return rng

    def check_stopped(self, step: int) -> None:
        """For a caller that does not train again a run that stopped early at ``step`` (its own
        record says so): refuse this run's settings where they differ from those the run was
        trained with (its latest checkpoint's, else its ``config.json``), as a resume of a
        finished run is refused (:func:`~muppets.train.rundir.check_resume`)."""
        path = latest_checkpoint(self.run_dir)
        if path is not None:
            state = read_state(path)
            check_resume(path, state.step, state.step, self._changed(state), self.after_training)
            return
        saved = saved_config(self.run_dir)
        if saved is not None:
            check_resume(self.run_dir / CONFIG_FILE, step, step, changed_settings(saved, self.run_config),
                         self.after_training)

    def _changed(self, state: TrainerState) -> dict[str, tuple[Any, Any]]:
        """The settings of this run that differ from those the checkpoint ``state`` recorded."""
        return {**changed_settings(state.run_config, self.run_config),
                **changed_settings({"train": state.train_config}, {"train": to_dict(self.config)})}

    def _misfit(self, path: Path, error: CheckpointMismatch) -> CheckpointError:
        """``error`` (the checkpoint at ``path`` does not load into this run's model or optimizer),
        told in the user's terms when the run's settings changed since: a different task list,
        label set or model preset builds different tensors, and the settings say which."""
        try:
            changed = self._changed(read_state(path))
        except CheckpointError:
            return error
        changed = effective_changes(changed)
        if not changed:
            return error
        return CheckpointError(f"{path}: written by a run with other settings ({describe(changed)}), whose model "
                               f"does not fit this one; resume it with its own settings (its config.json), or "
                               f"choose another run_dir. ({error})")

    # ------------------------------------------------------------------ the loop

    def _loop(self) -> TrainResult:
        losses: list[float] = []
        last_eval: dict[str, float] = {}
        stopping = False
        self._started, self._start_step = time.perf_counter(), self.step
        trimmer = HeapTrimmer(self.config.trim_heap_seconds)
        if self._auto is not None and self.step < self.config.steps:
            self._auto.rechecks = 0
            self._probe_precision()
        while self.step < self.config.steps:
            stats = self._train_step()
            trimmer.maybe()
            self._watch_precision(stats)
            losses.append(stats.loss)
            self._report(stats)
            out_of_time = any_rank(self._out_of_time())
            converged = False
            evaluating = out_of_time or self._eval_due()
            if self.evaluate is not None and evaluating:
                last_eval = self._run_evaluation()
                converged = self._converged(last_eval)
            if evaluating:  # the picture is redrawn also without an evaluate callback
                self._plot()
            stopping = out_of_time or converged or any_rank(self._stop_signal is not None)
            if stopping or self._due(self.config.checkpoint_every):
                self._save_checkpoint()
            if stopping:
                why = "time budget" if out_of_time else "should_stop" if converged else "signal"
                logger.warning("stopped by %s after step %d; checkpoint %s", why, self.step, self.last_checkpoint)
                break
        if trimmer.count:
            logger.info("heap trimmed %d times (%.1f s)", trimmer.count, trimmer.seconds)
        self._export()
        return TrainResult(self.step, losses, last_eval, self.last_checkpoint, stopping,
                           interrupted=stopping and why == "signal")

    def _out_of_time(self) -> bool:
        limit = self.config.max_minutes * 60.0
        return limit > 0 and self.step < self.config.steps and time.perf_counter() - self._started > limit

    def _converged(self, metrics: dict[str, float]) -> bool:
        """Ask ``should_stop`` (every rank, every evaluation); stopping at the last step is no stop."""
        if self.should_stop is None:
            return False
        return any_rank(bool(self.should_stop(self.step, metrics))) and self.step < self.config.steps

    def _eval_due(self) -> bool:
        extra = self.eval_also_at is not None and self.eval_also_at(self.step)
        return extra or self._due(self.config.eval_every)

    def _due(self, every: int) -> bool:
        """True at multiples of ``every`` (when > 0) and always at the last step."""
        return self.step == self.config.steps or (every > 0 and self.step % every == 0)

    def _elapsed(self) -> float:
        return self._elapsed_before + time.perf_counter() - self._started

    def _train_step(self) -> _StepStats:
        """One optimizer update; raises :class:`TrainingDiverged` before applying a bad one."""
        start = time.perf_counter()
        batches = self._micro_batches()
        counts, tokens = self._global_counts(batches)
        passes = time.perf_counter()
        sums = self._forward_backward(batches, counts)
        passes = time.perf_counter() - passes
        if self.frozen is not None:
            for param in self.frozen(self.step):
                param.grad = None
        terms = {k: sums[k] / max(counts[k], 1.0) for k in counts}
        loss = float(sum(terms.values()))
        grad_norm = self._clip_gradients()
        self._check_finite(loss, grad_norm)
        lr = self._apply_update()
        self.step += 1
        self.tokens_seen += tokens
        return _StepStats(loss, terms, lr, grad_norm, tokens, time.perf_counter() - start, passes)

    def _probe_precision(self, trigger: str = "") -> None:
        """``precision=auto``: time forward/backward passes of the next update's micro-batches in
        fp32 and bf16 (:class:`~muppets.train.precision.AutoPrecision`) and train on in the
        faster. Nothing of the run changes: no update is applied, and the gradients, buffers and
        random generators are put back as they were."""
        assert self._auto is not None
        batches = self._micro_batches()
        counts, tokens = self._global_counts(batches)
        params = list(self.model.parameters())
        grads = [p.grad for p in params]
        buffers = [b.detach().clone() for b in self.model.buffers()]

        def run(dtype: torch.dtype | None) -> None:
            self._amp = dtype
            self._forward_backward(batches, counts)
            for p in params:
                p.grad = None

        try:
            with preserved_rng():
                for p in params:
                    p.grad = None
                self._auto.probe(run, tokens)
        finally:
            for p, g in zip(params, grads):
                p.grad = g
            with torch.no_grad():
                for b, saved in zip(self.model.buffers(), buffers):
                    b.copy_(saved)
        self._amp = self._auto.dtype
        chosen = "bf16" if self._amp is not None else "fp32"
        if self.dist.is_main:
            when = f"at step {self.step}, {trigger}; measured again: " if trigger else ""
            logger.info("precision auto: %s%s (%s)", when, chosen, self._auto.reason)
        self._log.log({"step": self.step, "precision": chosen, "precision_reason": self._auto.reason,
                       "bf16_speedup": self._auto.speedup, **({"precision_trigger": trigger} if trigger else {})},
                      report=False)

    def _watch_precision(self, stats: _StepStats) -> None:
        """``precision=auto`` in bf16: measure again when its passes have slowed (every rank together)."""
        if self._auto is None or self._amp is None or self.step >= self.config.steps:
            return
        due = self._auto.observe(stats.pass_seconds, stats.tokens)
        if any_rank(due) if self.dist.world > 1 else due:
            self._probe_precision(self._auto.trigger or "another rank's bf16 passes slowed")

    def _micro_batches(self) -> list[dict[str, torch.Tensor]]:
        batches = self.data.micro_batches(self.step, self.dist.rank, self.dist.world)
        if len(batches) != self.config.accumulation:
            raise ConfigError(
                f"{type(self.data).__name__}.micro_batches returned {len(batches)} micro-batches "
                f"for step {self.step}; train.accumulation is {self.config.accumulation}"
            )
        return batches

    def _global_counts(self, batches: list[dict[str, torch.Tensor]]) -> tuple[dict[str, float], int]:
        """Per-term unit counts of this update over all micro-batches and ranks, and tokens."""
        norms = [self.data.normalizers(b) for b in batches]
        keys = sorted(norms[0])
        for norm in norms[1:]:
            if sorted(norm) != keys:
                raise ConfigError(f"normalizers disagree between micro-batches: {keys} vs {sorted(norm)}")
        local = [sum(float(n[k]) for n in norms) for k in keys]
        local.append(float(sum(int(self.data.num_tokens(b)) for b in batches)))
        total = all_reduce_sum(torch.tensor(local, dtype=torch.float64)).tolist()
        return dict(zip(keys, total[:-1])), int(total[-1])

    def _forward_backward(self, batches: list[dict[str, torch.Tensor]], counts: dict[str, float]) -> dict[str, float]:
        """Backpropagate ``world * sum_k loss_sums[k] / N_k`` per micro-batch; return global sums."""
        keys = sorted(counts)
        local = torch.zeros(len(keys), dtype=torch.float64, device=self._device)  # summed on the device:
        for index, batch in enumerate(batches):  # one copy to the host per update, not per micro-batch
            with self._sync(last=index == len(batches) - 1):
                with autocast(self._device, self._amp):
                    sums = self._loss_sums(self._net(**to_device(batch, self._device)), keys)
                loss = sum(sums[k] / max(counts[k], 1.0) for k in keys) * float(self.dist.world)
                loss.backward()
            local += torch.stack([sums[k].detach().double() for k in keys])
        return dict(zip(keys, all_reduce_sum(local).tolist()))

    def _sync(self, last: bool) -> AbstractContextManager:
        """DDP all-reduces gradients only on the last micro-batch of an update."""
        if last or self._net is self.model:
            return nullcontext()
        return self._net.no_sync()

    @staticmethod
    def _loss_sums(out: Any, keys: list[str]) -> dict[str, torch.Tensor]:
        sums = getattr(out, "loss_sums", None)
        if not isinstance(sums, dict):
            raise ConfigError(f"the model returned {type(out).__name__}, which has no loss_sums dict")
        if sorted(sums) != keys:
            raise ConfigError(f"model loss_sums terms {sorted(sums)} differ from data normalizers {keys}")
        return sums

    def _clip_gradients(self) -> float:
        """Global gradient norm before clipping; clips to ``clip_grad_norm`` when it is > 0.
        Parameters marked by :func:`~muppets.train.optim.exempt_from_clipping` are neither
        clipped nor counted (a non-finite gradient of theirs makes the norm NaN, so the step is
        refused as any other)."""
        grads = [p for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]
        params = [p for p in grads if is_clipped(p)]
        if any(not bool(torch.isfinite(p.grad).all()) for p in grads if not is_clipped(p)):
            return float("nan")
        if not params:
            return 0.0
        if self.config.clip_grad_norm > 0:
            return float(torch.nn.utils.clip_grad_norm_(params, self.config.clip_grad_norm))
        norms = torch.stack([torch.linalg.vector_norm(p.grad.detach(), dtype=torch.float32) for p in params])
        return float(torch.linalg.vector_norm(norms))

    def _check_finite(self, loss: float, grad_norm: float) -> None:
        if math.isfinite(loss) and math.isfinite(grad_norm):
            return
        self.optimizer.zero_grad(set_to_none=True)
        good = str(self.last_checkpoint) if self.last_checkpoint else "none (no checkpoint written yet)"
        message = (
            f"loss {loss} / gradient norm {grad_norm} at step {self.step + 1} is not finite; "
            f"the update was not applied; last good checkpoint: {good}"
        )
        logger.error(message)
        raise TrainingDiverged(message)

    def _apply_update(self) -> float:
        cfg = self.config
        factor = lr_factor(
            self.step + 1, total_steps=cfg.steps, warmup_steps=cfg.warmup_steps,
            schedule=cfg.schedule, min_lr_ratio=cfg.min_lr_ratio,
        )
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.lr * factor
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return cfg.lr * factor

    # ------------------------------------------------------------------ reporting, eval, saving

    def _report(self, stats: _StepStats) -> None:
        record = {"step": self.step, "loss": stats.loss, **{f"loss/{k}": v for k, v in stats.terms.items()}}
        tokens_per_s = stats.tokens / max(stats.seconds, 1e-9)
        record.update(lr=stats.lr, grad_norm=stats.grad_norm, real_tokens=stats.tokens, tokens_per_s=tokens_per_s,
                      elapsed_s=self._elapsed())
        if self.step_extras is not None:
            record.update(self.step_extras())
        every = self.config.log_every
        periodic = every > 0 and self.step % every == 0
        self._log.log(record, report=periodic)
        if periodic and self.dist.is_main:
            logger.info(
                "step %d/%d loss %.4f lr %.3g grad_norm %.3f tokens/s %.0f",
                self.step, self.config.steps, stats.loss, stats.lr, stats.grad_norm, tokens_per_s,
            )
        if self._bar is not None and not self._bar.disable:
            eta = run_eta(self.step, self.config.steps, self._start_step,
                          time.perf_counter() - self._started, self.config.max_minutes * 60.0)
            self._bar.set_postfix_str(f"{eta}, loss {stats.loss:.4f}, {tokens_per_s:.0f} tok/s", refresh=False)
            self._bar.update(1)

    def _run_evaluation(self) -> dict[str, float]:
        """Call ``evaluate`` in eval mode, without gradients or RNG side effects; log the result."""
        assert self.evaluate is not None
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), preserved_rng():
                metrics = {k: float(v) for k, v in self.evaluate(self.model).items()}
        finally:
            self.model.train(was_training)
        self._log.log({"step": self.step, **{f"eval/{k}": v for k, v in metrics.items()}})
        if self.dist.is_main:
            on = "; ".join(f"{prefix or 'metrics'} on {what}" for prefix, what in self.eval_labels.items())
            logger.info("eval at step %d: %s%s", self.step, ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()),
                        f" ({on})" if on else "")
        return metrics

    def _logged_evaluation(self) -> dict[str, float]:
        """The metrics of the evaluation logged at the current step (a finished run asked again
        returns the evaluation it ended with, not nothing); {} when there is none."""
        metrics: dict[str, float] = {}
        for record in read_log(self.run_dir, strict=False):
            if record.get("step") == self.step:
                metrics.update({k[len("eval/"):]: v for k, v in record.items() if k.startswith("eval/")})
        return metrics

    def _plot(self) -> None:
        """Main rank redraws ``run_dir/training_curves.png`` (and the caller's ``draw``) from the
        log, once per step; never raises."""
        if not (self.config.plot and self.dist.is_main) or self._plotted_step == self.step:
            return
        self._plotted_step = self.step
        write_run_plot(self.run_dir, title=f"{run_name(self.run_dir)}: step {self.step} of {self.config.steps}",
                       panels=partial(plan_panels, eval_labels=self.eval_labels, baselines=self.baselines))
        if self.draw is not None:
            self.draw()

    def _save_checkpoint(self) -> None:
        """Main rank writes the checkpoint (with every rank's torch RNG state); all ranks wait."""
        rng = capture_rng()
        if self.dist.world > 1:
            for rank, state in enumerate(all_gather(rng.torch["torch.cpu"])):
                rng.torch[f"torch.cpu.rank{rank}"] = state
        path = self.checkpoint_dir / checkpoint_name(self.step)
        if self.dist.is_main:
            state = TrainerState(
                step=self.step, tokens_seen=self.tokens_seen, elapsed_s=self._elapsed(),
                world_size=self.dist.world, train_config=to_dict(self.config), run_config=self.run_config,
            )
            path = save_checkpoint(
                self.checkpoint_dir, self.model, self.optimizer, self._param_names, state, rng,
                keep=checkpoints_kept(self.config.keep_checkpoints),
            )
            self._log.log({"step": self.step, "checkpoint": str(path)}, report=False)
            logger.info("checkpoint %s", path)
        barrier()
        self.last_checkpoint = path

    def _export(self) -> None:
        """Main rank calls ``save_model`` into ``run_dir/model`` (atomically); all ranks wait."""
        if self.save_model is None:
            return
        if self.dist.is_main:
            with atomic_dir(self.run_dir / "model") as tmp:
                self.save_model(self.model, tmp)
            logger.info("exported the model to %s", self.run_dir / "model")
        barrier()

    # ------------------------------------------------------------------ signals and progress

    def _signal_handlers(self) -> AbstractContextManager:
        """On SIGINT/SIGTERM finish the step, checkpoint and return; a second signal aborts."""
        return stop_signal_handler(self._on_signal, "train()")

    def _on_signal(self, signum: int, frame: object) -> None:
        if self._stop_signal is not None:
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}: aborting without a checkpoint")
        self._stop_signal = signum
        logger.warning("%s received: finishing step %d, then checkpointing", signal.Signals(signum).name, self.step + 1)

    @contextmanager
    def _progress_bar(self) -> Iterator[None]:
        """tqdm bar on the main rank with the run's ETA (:mod:`muppets.train.progress`); disabled
        when ``progress`` is off or stderr is not a TTY."""
        bar = training_bar(self.config.steps, self.step, self.config.progress and self.dist.is_main)
        self._bar = bar
        try:
            yield
        finally:
            bar.close()
            self._bar = None
