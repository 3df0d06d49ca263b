"""What every pretraining recipe shares after its inputs are ready: training with the shared
:class:`~muppets.train.Trainer`, held-out evaluation by loss term, the unigram baseline, and
the export of ``<run_dir>/final`` with ``summary.json``.

A recipe describes its run in a :class:`Pretraining` (model, objective data, how to evaluate,
export and score the baseline, and any summary entries of its own) and hands it to
:func:`train_and_export`. (:mod:`muppets.recipes.common` holds the first half.)
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from muppets.config import atomic_dir, to_dict, write_json_atomic
from muppets.data.shards import TokenCorpus
from muppets.errors import ConfigError
from muppets.recipes.common import RunSection
from muppets.train import StepData, Trainer
from muppets.train.device import to_device
from muppets.train.distributed import dist_info

Batch = dict[str, torch.Tensor]
Metrics = dict[str, float]

log = logging.getLogger(__name__)


@dataclass
class Pretraining:
    """What one recipe brings to :func:`train_and_export`."""

    model: nn.Module  # seeded and on its device (common.seeded_model)
    data: StepData  # the objective's batches; also ``eval_batches(batch_size)``
    evaluate: Callable[[nn.Module], Metrics]  # held-out metrics (see held_out_evaluator)
    export: Callable[[Path], Any]  # writes the final model into the directory it is given
    baseline: Callable[[], Metrics]  # the unigram baseline on the same held-out targets
    summary: dict = field(default_factory=dict)  # the recipe's own summary entries
    frozen: Callable[[int], Sequence[nn.Parameter]] | None = None  # parameters held still at a step (Trainer)


def train_and_export(cfg: RunSection, corpus: TokenCorpus, job: Pretraining, resume: bool = True) -> dict:
    """Train (resuming from ``run_dir``'s checkpoints when ``resume``), then on rank 0 export
    ``<run_dir>/final`` (with the resolved config as ``muppets_config.json``), score the
    baseline and write ``summary.json``. Every rank returns the summary (rank 0's has the
    baseline). The baseline is scored before training (the held-out batches and the training
    counts do not change), so that ``training_curves.png`` draws it beside the evaluations
    (:func:`baseline_lines`). A run stopped by a signal is exported too (the model so far is of
    use), with ``interrupted: true`` in the summary: it is not finished, and the same command
    resumes it."""
    run_dir = Path(cfg.run_dir)
    baseline = job.baseline() if dist_info().is_main else {}
    trainer = Trainer(job.model, job.data, cfg.train, run_dir, evaluate=job.evaluate, run_config=to_dict(cfg),
                      frozen=job.frozen, baselines=baseline_lines(baseline), eval_labels={"": "held-out documents"},
                      after_training=getattr(cfg, "AFTER_TRAINING", ()))
    result = trainer.train(resume=resume)
    final = run_dir / "final"
    summary = {"step": result.step, "stopped_early": result.stopped_early, "interrupted": result.interrupted,
               "final": str(final),
               "eval": result.last_eval, "corpus": str(corpus.directory), "tokens": corpus.num_tokens,
               "documents": corpus.num_documents, **job.summary}
    if dist_info().is_main:
        with atomic_dir(final) as tmp:  # a re-run's export replaces the last one whole
            job.export(tmp)
            _keep_sentence_files(cfg, tmp)
            write_json_atomic(tmp / "muppets_config.json", to_dict(cfg))
        summary["unigram_baseline"] = baseline
        summary["worse_than_baseline"] = worse_than_baseline(result.last_eval, summary["unigram_baseline"])
        for name, (value, base) in summary["worse_than_baseline"].items():
            log.warning(worse_note(name, value, base))
        write_json_atomic(run_dir / "summary.json", summary)
    return summary


def _keep_sentence_files(cfg: RunSection, final: Path) -> None:
    """Continued pretraining from a sentence-transformers directory (``model.init_from=minilm``)
    keeps its sentence modules: the adapted model is served pooled and normalised as it was."""
    init_from = getattr(getattr(cfg, "model", None), "init_from", "")
    if init_from:
        from muppets.paths import resolve_model_path
        from muppets.sentence import keep_sentence_files

        keep_sentence_files(resolve_model_path(init_from), final)


# ----------------------------------------------------------------------------- evaluation


def held_out_evaluator(data: Any, batch_size: int, perplexity: Sequence[str] = ()) -> Callable[[nn.Module], Metrics]:
    """A trainer ``evaluate`` callback on the fixed held-out batches ``data.eval_batches``
    (documents never trained on): for every loss term of the model's output (``loss_sums``,
    ``correct``, ``counts``), ``{term}_loss`` per unit and ``{term}_accuracy``; for the
    language-model terms named in ``perplexity``, also ``{term}_perplexity`` = exp(loss)."""
    batches = fixed_eval_batches(data, batch_size)

    def evaluate(model: nn.Module) -> Metrics:
        return term_metrics(_term_sums(model, batches), perplexity)

    return evaluate


def _term_sums(model: nn.Module, batches: Sequence[Batch]) -> dict[str, list[float]]:
    """Per loss term: [summed loss, correct predictions, units] over ``batches``."""
    sums: dict[str, list[float]] = {}
    device = next(model.parameters()).device
    for batch in batches:
        out = model(**to_device(batch, device))
        for term, loss in out.loss_sums.items():
            acc = sums.setdefault(term, [0.0, 0.0, 0.0])
            acc[0] += float(loss)
            acc[1] += float(out.correct[term])
            acc[2] += float(out.counts[term])
    return sums


def term_metrics(sums: dict[str, list[float]], perplexity: Sequence[str] = ()) -> Metrics:
    """``{term}_loss``, ``{term}_accuracy`` (and ``{term}_perplexity``) of :func:`_term_sums`;
    a term without units is left out."""
    metrics: Metrics = {}
    for term, (loss, correct, n) in sums.items():
        if n:
            metrics.update({f"{term}_loss": loss / n, f"{term}_accuracy": correct / n})
            if term in perplexity:
                metrics[f"{term}_perplexity"] = perplexity_of(loss / n)
    return metrics


def perplexity_of(mean_loss: float) -> float:
    """exp(mean cross entropy), capped at exp(50) so an untrained model's stays finite."""
    return math.exp(min(mean_loss, 50.0))


# ----------------------------------------------------------------------------- unigram baseline


def held_out(data: Any, batch_size: int, pick: Callable[[Batch], np.ndarray]) -> np.ndarray:
    """``pick(batch)`` of every held-out batch, concatenated (e.g. one term's target ids)."""
    return np.concatenate([pick(batch) for batch in fixed_eval_batches(data, batch_size)])


_EVAL_BATCHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # data -> {batch_size: batches}


def fixed_eval_batches(data: Any, batch_size: int) -> list[Batch]:
    """``data.eval_batches(batch_size)``, built once per data object and batch size and kept
    while the data lives: the evaluator and the unigram baseline read the same batches, and
    what building them logs (e.g. too few held-out NSP pairs) is logged once."""
    built = _EVAL_BATCHES.setdefault(data, {})
    if batch_size not in built:
        batches = data.eval_batches(batch_size)
        if not batches:  # before training, not after it: the evaluation and the baseline need them
            raise ConfigError("the held-out documents give no held-out sequences to evaluate on: raise "
                              "data.eval_fraction (and data.eval_examples, if 0), or pretrain on a larger corpus")
        built[batch_size] = batches
    return built[batch_size]


def baseline_lines(baseline: Metrics) -> dict[str, tuple[str, float]]:
    """The baseline's figures as the lines of ``training_curves.png`` (metric -> (label, value)):
    an NSP accuracy is the majority class's, any other accuracy that of always guessing the most
    frequent token, a perplexity or loss the unigram distribution's.

    >>> baseline_lines({"nsp_accuracy": 0.5, "mlm_accuracy": 0.06})["mlm_accuracy"]
    ('unigram: the most frequent token', 0.06)
    """
    def label(name: str) -> str:
        if name.startswith("nsp"):
            return "majority class"
        return "unigram: the most frequent token" if name.endswith("accuracy") else "unigram distribution"

    lines = {name: (label(name), float(value)) for name, value in baseline.items()}
    for name, value in baseline.items():  # a perplexity's log is the mean cross-entropy: the loss panel's line
        term = name.removesuffix("_perplexity")
        if term != name and value > 0 and f"{term}_loss" not in lines:
            lines[f"{term}_loss"] = (label(name), math.log(value))
    return lines


UNDERTRAINED = "the model has learned less than the baseline knows: train longer (train.steps), or check train.lr and train.warmup_steps"


def worse_note(name: str, value: float, baseline: float) -> str:
    """The sentence that says a held-out figure is worse than its baseline (the log and the
    final summary), e.g. ``held-out mlm perplexity 2,826.8 is worse than the baseline's 955.6: …``."""
    shown = "{:.4f}" if name.endswith("accuracy") else "{:,.1f}"
    return (f"held-out {name.replace('_', ' ')} {shown.format(value)} is worse than the baseline's "
            f"{shown.format(baseline)}: {UNDERTRAINED}")


def worse_than_baseline(metrics: Metrics, baseline: Metrics) -> dict[str, tuple[float, float]]:
    """``{name: (held-out value, baseline value)}`` of every metric the baseline also scores
    where the model does worse: a higher perplexity or loss, a lower accuracy."""
    worse = {}
    for name, base in baseline.items():
        value = metrics.get(name)
        if value is None:
            continue
        lower_is_better = name.endswith(("perplexity", "loss"))
        if (value > base) if lower_is_better else (value < base):
            worse[name] = (float(value), float(base))
    return worse


def unigram_scores(counts: np.ndarray, targets: np.ndarray) -> tuple[float, float]:
    """(perplexity, accuracy) on ``targets`` of what token frequencies alone give: the
    add-one-smoothed unigram of ``counts (V,)``, and always guessing its most frequent id."""
    logp = np.log((counts + 1) / (counts.sum() + len(counts)))  # (V,)
    return math.exp(-float(logp[targets].mean())), float((targets == counts.argmax()).mean())
