"""What the weak-supervision end-model benchmarks share (``weak_end_model.py``, ``weak_sst2.py``):
fine-tuning jobs run K at a time in forked processes (one torch thread each), and the
mean ± std / paired-difference summaries of their results.

A job is ``(row, seed, data_key, overrides)``: the :class:`~muppets.tasks.spec.TaskData` is
looked up by ``data_key`` in a dict the workers inherit by ``fork`` (nothing is pickled but the
small result dicts), and ``overrides`` are :class:`FinetuneConfig` fields.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import multiprocessing
import shutil
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from muppets.transfer.finetune import FinetuneConfig, mean_std, run

logger = logging.getLogger("weak_runs")

_DATA: dict[str, Any] = {}  # data_key -> TaskData, set before the workers fork


@dataclasses.dataclass(frozen=True)
class Job:
    row: str  # the table row, e.g. "soft"
    seed: int
    data_key: str  # which TaskData of _DATA
    run_dir: str
    overrides: tuple[tuple[str, Any], ...] = ()  # FinetuneConfig fields for this row


def common_arguments(parser: argparse.ArgumentParser, seeds: Sequence[int], root: Path) -> None:
    """The options both benchmarks take (smoke run, seeds, parallel runs, paths)."""
    parser.add_argument("--quick", action="store_true", help="smoke run: small slices, 1 seed, 1 epoch")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(seeds))
    parser.add_argument("--parallel", type=int, default=1, help="fine-tuning runs at a time (1 thread each)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the runs an interrupted call left (same LFs and data only)")
    parser.add_argument("--model", default="minilm", help="the end model")
    parser.add_argument("--cache-dir", default=str(root / "runs/weak-cache"), help="label-matrix cache")
    parser.add_argument("--run-root", default="", help="where the fine-tuning runs go")
    parser.add_argument("--out", default="", help="result JSON")


def setup() -> None:
    """Logging, and one torch thread in this process too: the model LFs run here before the
    fine-tuning workers fork, and a fork after a multi-threaded OpenMP region can hang."""
    import torch
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("muppets").setLevel(logging.WARNING)


def end_model_config(base: dict[str, Any], job: Job) -> FinetuneConfig:
    """The run's config: ``base`` fields, the row's overrides, its seed and run directory."""
    return FinetuneConfig(**{**base, **dict(job.overrides), "seed": job.seed,
                             "run_dir": job.run_dir})


def _one(args: tuple[dict[str, Any], Job, bool]) -> dict[str, Any]:
    base, job, resume = args
    start = time.process_time()
    done = Path(job.run_dir) / "metrics.json"
    if resume and done.is_file():  # finished by an earlier call
        summary = json.loads(done.read_text(encoding="utf-8"))
    else:
        summary = run(end_model_config(base, job), resume=resume, data=_DATA[job.data_key])
        # best/, metrics.json and predictions.jsonl stay; the last checkpoint (weights and
        # optimizer state, ~260 MB for MiniLM) is only needed to resume an interrupted run
        shutil.rmtree(Path(job.run_dir) / "checkpoints", ignore_errors=True)
    return {"row": job.row, "seed": job.seed, "data": job.data_key, "run_dir": job.run_dir,
            "cpu_s": round(time.process_time() - start, 1),
            "dev": summary.get("dev", {}), "test": summary.get("test", {}),  # as finetune names them
            "best_step": summary["best_step"], "steps": summary["steps"],
            "train_examples": summary["train_examples"]}


def run_jobs(jobs: Sequence[Job], data: dict[str, Any], base: dict[str, Any],
             parallel: int = 1, resume: bool = False) -> list[dict[str, Any]]:
    """Every job's result (in job order); ``parallel`` > 1 runs that many at a time in forked
    processes (set ``threads=1`` in ``base``: one core each). ``resume`` reads the runs an
    earlier call finished and continues those it left (only right if the data and LFs are
    unchanged); by default every run starts afresh."""
    _DATA.clear()
    _DATA.update(data)
    if parallel <= 1 or len(jobs) <= 1:
        out = []
        for job in jobs:
            out.append(_one((base, job, resume)))
            logger.info("%s seed %d: dev %s test %s", job.row, job.seed, out[-1]["dev"], out[-1]["test"])
        return out
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=parallel, mp_context=ctx) as pool:
        out = list(pool.map(_one, [(base, j, resume) for j in jobs]))
    for r in out:
        logger.info("%s seed %d: dev %s test %s", r["row"], r["seed"], r["dev"], r["test"])
    return out


def table(results: Sequence[dict[str, Any]], metric: str = "accuracy",
          split: str = "test") -> dict[str, dict[str, Any]]:
    """Per row: ``mean_std`` of ``split``'s ``metric`` over its seeds (in points, 0-100)."""
    rows: dict[str, list[float]] = {}
    for r in results:
        rows.setdefault(r["row"], []).append(100.0 * r[split][metric])
    return {row: mean_std(values) for row, values in rows.items()}


def paired(results: Sequence[dict[str, Any]], reference: str, metric: str = "accuracy",
           split: str = "test") -> dict[str, dict[str, Any]]:
    """``reference`` minus every other row, seed by seed (same seed = same head init and batch
    order): mean ± std of the differences, in points, and how many seeds each side wins."""
    by = {(r["row"], r["seed"]): 100.0 * r[split][metric] for r in results}
    rows = sorted({r["row"] for r in results} - {reference})
    out = {}
    for row in rows:
        seeds = sorted(s for (name, s) in by if name == row and (reference, s) in by)
        if not seeds:
            continue
        diffs = np.array([by[(reference, s)] - by[(row, s)] for s in seeds])
        out[f"{reference} - {row}"] = {**mean_std(diffs), "seeds": seeds,
                                       "wins": int((diffs > 0).sum()),
                                       "losses": int((diffs < 0).sum())}
    return out


def lf_report(lfs: Sequence[Any], L: np.ndarray, gold: np.ndarray) -> list[dict[str, Any]]:
    """Per LF on a labelled split: coverage and accuracy where it votes (%, 1 decimal)."""
    out = []
    for j, lf in enumerate(lfs):
        votes = L[:, j] != -1
        acc = float((L[votes, j] == gold[votes]).mean()) if votes.any() else float("nan")
        out.append({"lf": lf.name, "coverage": round(100 * float(votes.mean()), 1),
                    "votes": int(votes.sum()), "accuracy": round(100 * acc, 1)})
    return out


def hard_targets(model: Any, L: np.ndarray) -> np.ndarray:
    """``(n, K)`` one-hot targets of ``model.predict(L)``; a row the model abstains on (-1:
    majority vote on a row no LF labels) keeps ``predict_proba``'s row instead of becoming a
    one-hot of the last class (numpy's ``eye[-1]``)."""
    labels = model.predict(L)
    probs = model.predict_proba(L)
    return np.where(labels[:, None] >= 0, np.eye(probs.shape[1])[labels], probs)


def write_json(path: str | Path, obj: Any) -> None:
    from muppets.config import write_json_atomic
    write_json_atomic(Path(path), obj)
