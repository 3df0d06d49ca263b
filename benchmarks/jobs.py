"""Benchmark jobs: child processes on one thread each, ``parallel`` at a time, in dependency order.

A table that needs pretraining and then fine-tuning (``chinese_masking.py``, ``xlingual_table.py``)
lists its jobs as ``(name, fn, dependencies)``; :func:`schedule` starts each as soon as its
dependencies have finished, so fine-tuning uses a free core while a slower pretraining still runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("jobs")
Job = tuple[str, Callable[[], Any], list[str]]


def run_logged(cmd: list[str], log_to: Path) -> None:
    """``cmd`` in a child process on one thread (``OMP_NUM_THREADS=1``), from the repository root,
    its output appended to ``log_to``; a failure raises ``CalledProcessError``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log_to, "a") as out:
        subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=True, cwd=ROOT, env=env)


def schedule(jobs: list[Job], parallel: int) -> None:
    """Run ``(name, fn, dependencies)`` jobs, ``parallel`` at a time, each as soon as its dependencies
    have finished, earlier jobs first. A failed job raises after the jobs already running end."""
    pending, running, done = list(jobs), {}, set()
    with ThreadPoolExecutor(parallel) as pool:  # each job is a child process
        while pending or running:
            for job in [j for j in pending if all(d in done for d in j[2])]:
                if len(running) >= parallel:
                    break
                pending.remove(job)
                running[pool.submit(job[1])] = job[0]
            if not running:
                raise RuntimeError(f"jobs wait on dependencies that never run: {[j[0] for j in pending]}")
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                name = running.pop(future)
                log.info("finished %s: %s", name, future.result())
                done.add(name)


def pretraining_done(run: Path) -> bool:
    """A pretraining run has ended for good: its ``summary.json`` exists and no signal stopped it
    (a signal still exports ``final/``, so ``final/`` alone does not mean finished)."""
    path = run / "summary.json"
    if not path.is_file():
        return False
    return not json.loads(path.read_text()).get("interrupted", False)


def step_budget(steps: int) -> list[str]:
    """Overrides that set a pretraining's steps with 6% warmup (the shipped configs' share); none for 0."""
    return [f"train.steps={steps}", f"train.warmup_steps={round(0.06 * steps)}"] if steps else []


def pretraining_rows(pretraining: dict) -> list[str]:
    """Markdown rows: each pretrained model's steps, minutes and held-out MLM accuracy by step."""
    lines = ["| pretrained | steps | minutes | held-out MLM accuracy (15%, by step) |", "|---|---|---|---|"]
    for name, facts in pretraining.items():
        curve = ", ".join(f"{e['step']}: {100 * e['eval/mlm_accuracy']:.2f}%" for e in facts["eval_curve"])
        lines.append(f"| {name} | {facts['steps']} | {facts['train_minutes']} | {curve} |")
    return lines


def write_results(out: Path, result: dict, markdown: str) -> None:
    """``out`` (JSON) and its ``.md`` table side by side; the table is printed too."""
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown)
    print(markdown)


def table_arguments(ap: argparse.ArgumentParser, root: str) -> None:
    """The options every pretrain-then-fine-tune table shares (``--root`` defaults to ``root``)."""
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--parallel", type=int, default=1, help="jobs at a time (one thread each)")
    ap.add_argument("--pretrain-steps", type=int, default=0,
                    help="pretraining steps of every model (warmup 6%% of them); default: the config's")
    ap.add_argument("--root", default="", help=f"run directories (default {root}, or {root}-smoke with --smoke)")
    ap.add_argument("--table-only", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="tiny settings end to end (not a result)")
    ap.add_argument("--out", default="", help="results JSON (default benchmarks/results/<table>.json; "
                                              "with --smoke, <root>/table.json)")


def table_paths(args: argparse.Namespace, root: str, out: str) -> tuple[Path, Path]:
    """The run root and the results JSON. A smoke run gets its own root and never writes into
    ``benchmarks/results`` or a real table's runs (which a later real run would reuse)."""
    run_root = (ROOT / (args.root or (f"{root}-smoke" if args.smoke else root))).resolve()
    run_root.mkdir(parents=True, exist_ok=True)
    return run_root, Path(args.out) if args.out else (run_root / "table.json" if args.smoke else ROOT / out)
