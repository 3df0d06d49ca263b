"""How much choosing the best epoch on dev inflates the dev figure (issue 14, item 6).

Reads fine-tuning runs made under the new protocol with ``watch_dev=true`` (the best epoch is
chosen on a 10% slice of train; dev is scored at every evaluation only to be logged), e.g.

    THREADS=1 TAG=-sel EXTRA=watch_dev=true bash benchmarks/finetune_table.sh minilm "rte mrpc"
    python benchmarks/selection_bias.py --runs runs --tag=-sel --out benchmarks/results/selection_bias.json

and compares, seed by seed on the same runs (paired):

* ``selected``: dev of the model the train slice chose — what the run reports now;
* ``max over dev``: the best dev evaluation — what choosing on dev and reporting dev gives;
* ``last``: dev of the last evaluation (a fixed number of epochs).

Cells are mean ± sample std over seeds, in percent. ``--root DIR --task sst2`` reads one run
root instead (a ``muppets features`` run with ``watch_dev=true``, say).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

# task -> (primary key used for the dev choice, keys to report)
TASKS = {
    "sst2": ("accuracy", ["accuracy"]),
    "cola": ("mcc", ["mcc"]),
    "mrpc": ("f1", ["f1", "accuracy"]),
    "stsb": ("corr", ["pearson", "spearman"]),
    "rte": ("accuracy", ["accuracy"]),
}


def seed_outcome(run: Path, primary: str, keys: list[str]) -> dict[str, dict[str, float]] | None:
    """``{key: {selected, max_dev, last}}`` for one seed's run directory (None if unfinished)."""
    metrics_path = run / "metrics.json"
    if not metrics_path.is_file():
        return None
    metrics = json.loads(metrics_path.read_text())
    evals = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    evals = [r for r in evals if f"eval/dev/{primary}" in r]
    if not evals:
        return None
    best = max(range(len(evals)), key=lambda i: (evals[i][f"eval/dev/{primary}"], -i))  # first max
    return {k: {"selected": metrics["dev"][k], "max_dev": evals[best][f"eval/dev/{k}"],
                "last": evals[-1][f"eval/dev/{k}"]} for k in keys} | {
        "_": {"selection": metrics.get("selection"), "best_step": metrics.get("best_step"),
              "dev_best_step": evals[best]["step"], "evaluations": len(evals)}}


def mean_std(values: list[float]) -> tuple[float, float]:
    arr = 100.0 * np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0


def fmt(values: list[float]) -> str:
    mean, std = mean_std(values)
    return f"{mean:.2f} ± {std:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=Path, default=Path("runs"))
    ap.add_argument("--backbone", default="minilm")
    ap.add_argument("--tag", default="-sel")
    ap.add_argument("--root", type=Path, help="one run root holding seed-*/ (e.g. a features run) instead of --runs")
    ap.add_argument("--task", help="with --root: its task")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = {}
    print("| task, dev metric | seeds | reported now (chosen on train slice) | max over dev evaluations "
          "(old protocol) | last epoch | max − reported (paired) |")
    print("|---|---|---|---|---|---|")
    for task, (primary, keys) in TASKS.items():
        if args.root is not None and task != args.task:
            continue
        root = args.root or args.runs / f"ft-{task}-{args.backbone}{args.tag}"
        seeds = [s for s in (seed_outcome(d, primary, keys) for d in sorted(root.glob("seed-*"))) if s]
        if not seeds:
            continue
        result[task] = seeds
        for k in keys:
            sel = [s[k]["selected"] for s in seeds]
            top = [s[k]["max_dev"] for s in seeds]
            last = [s[k]["last"] for s in seeds]
            diff = [a - b for a, b in zip(top, sel)]
            print(f"| {task} {k} | {len(seeds)} | {fmt(sel)} | {fmt(top)} | {fmt(last)} | {fmt(diff)} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
