"""Issue 55: the distillation table — every variant's score over seeds, paired against the
student fine-tuned alone, and (with --speed) its throughput, in one JSON, one Markdown table and
one plot (score vs sentences/s at batch 32).

    python benchmarks/distill_table.py --root runs/distill --task sst2 --teacher runs/ft-sst2 \
        --speed benchmarks/results/issue55/speed.json --out benchmarks/results/issue55/sst2.json

Runs are ``<root>/<task>/<variant>/seed-N/metrics.json`` (benchmarks/distill_runs.sh). The score
is dev accuracy (SST-2), dev F1 (MRPC) or test entity F1 (CoNLL-2003, whose dev chose the model).
Paired differences: variant − its student fine-tuned alone (``alone``; ``l4-alone`` for the
``l4-…`` variants, ``rand-alone`` for ``rand-…``) for the seeds both have, mean ± sample std.
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
    for variant, seeds in runs.items():
        base_name = next(b for b in (variant.split("-")[0] + "-alone", "alone") if b in runs or b == "alone")
        base = runs.get(base_name, {})
        scores = {s: score_of(m, task) for s, m in seeds.items()}
        row = {"score": mean_std(list(scores.values())), "seeds": sorted(scores),
               "student": next(iter(seeds.values()))["student"],
               "transfer_set": next(iter(seeds.values())).get("transfer_set"),
               "losses": next(iter(seeds.values())).get("losses"),
               "best_seed1": seeds[min(seeds)]["best"]}
        paired = [scores[s] - score_of(base[s], task) for s in scores if s in base]
        if variant != base_name and paired:
            row["minus_alone"] = mean_std(paired)
            row["baseline"] = base_name
        if teacher is not None:
            row["minus_teacher"] = row["score"]["mean"] - score_of(teacher, task)
        rows[variant] = row
    return rows


def speed_of(speed: dict | None, model_dir: str) -> dict | None:
    """The int8_speed.py result of ``model_dir`` (matched on the resolved path)."""
    if not speed:
        return None
    want = str(Path(model_dir).resolve())
    return next((r for r in speed["results"] if str(Path(r["model"]).resolve()) == want), None)


def per_s(result: dict | None, runtime: str, batch: int) -> float | None:
    cell = (result or {}).get("speed", {}).get(runtime, {}).get(str(batch))
    return None if cell is None else float(cell["per_s_median"])


def change(result: dict | None, runtime: str, metric: str) -> float | None:
    """The change of ``metric`` (the task's score key: accuracy, f1) ``runtime`` made, in points."""
    changes = (result or {}).get("accuracy", {}).get("change", {}).get(runtime)
    return None if not changes or metric not in changes else 100.0 * float(changes[metric])


def markdown(result: dict, teacher_dir: str | None) -> str:
    """One row per model: score over seeds, paired gain, speed at batch 1 / 32 in float32, int8's
    speed-up and score change (seed 1's student)."""
    speed = result.get("speed")
    t = speed_of(speed, teacher_dir) if teacher_dir else None
    t32 = per_s(t, "torch-float32", 32)
    head = ("| model | parameters | score (mean ± std, n) | − alone (paired) | sent/s b1 / b32 | b32 ÷ teacher | "
            "int8: b32 ÷ float32; score change | bf16: b32 ÷ float32 |")
    rows = [head, "|" + "---|" * 8]

    def cells(res: dict | None) -> list[str]:
        b1, b32 = per_s(res, "torch-float32", 1), per_s(res, "torch-float32", 32)
        i32, bf = per_s(res, "torch-int8", 32), per_s(res, "torch-bf16", 32)
        ch = change(res, "torch-int8", SCORE[result["task"]][1])
        return [f"{b1:.0f} / {b32:.0f}" if b1 and b32 else "—", f"{b32 / t32:.2f}×" if b32 and t32 else "—",
                f"{i32 / b32:.2f}×; {ch:+.2f}" if i32 and b32 and ch is not None else "—",
                f"{bf / b32:.3f}×" if bf and b32 else "—"]

    if result.get("teacher") is not None:
        rows.append("| teacher (MiniLM fine-tuned, 1 run) | 22.7 M | " + f"{result['teacher']:.2f} | — | "
                    + " | ".join(cells(t)) + " |")
    for name, row in result["variants"].items():
        s = row["score"]
        paired = row.get("minus_alone")
        res = speed_of(speed, row.get("best_seed1", "")) if speed else None
        rows.append(f"| {name} | {row['student']['parameters'] / 1e6:.1f} M | {s['mean']:.2f} ± {s['std']:.2f} ({s['n']}) | "
                    + (f"{paired['mean']:+.2f} ± {paired['std']:.2f}" + (f" (vs {row['baseline']})" if row.get("baseline") != "alone" else "")
                   if paired else "—") + " | "
                    + " | ".join(cells(res)) + " |")
    return "\n".join(rows)


def plot(result: dict, teacher_dir: str | None, path: str) -> None:
    """Score vs sentences/s at batch 32 (log scale): every model in float32 and int8."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speed = result.get("speed")
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    points = []
    if result.get("teacher") is not None and teacher_dir:
        points.append(("teacher", result["teacher"], speed_of(speed, teacher_dir)))
    for name, row in result["variants"].items():
        points.append((name, row["score"]["mean"], speed_of(speed, row.get("best_seed1", ""))))
    for marker, runtime in (("o", "torch-float32"), ("s", "torch-int8"), ("^", "onnx-int8")):
        xs, ys, names = [], [], []
        for name, score, res in points:
            x = per_s(res, runtime, 32)
            if x:
                xs.append(x)
                ys.append(score + (change(res, runtime, SCORE[result["task"]][1]) or 0.0) if runtime != "torch-float32" else score)
                names.append(name)
        ax.scatter(xs, ys, marker=marker, label=runtime)
        for x, y, n in zip(xs, ys, names):
            if runtime == "torch-float32":
                ax.annotate(n, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("sentences/s at batch 32 (2 threads)")
    split, key = result["score"]
    ax.set_ylabel(f"{result['task']} {split} {key} (%)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)


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
    teacher_best = str(Path(args.teacher) / "best") if args.teacher else None
    print(markdown(result, teacher_best))
    if args.plot:
        plot(result, teacher_best, args.plot)
    for name, row in rows.items():
        s = row["score"]
        extra = f"  paired vs alone {row['minus_alone']['mean']:+.2f} ± {row['minus_alone']['std']:.2f}" if "minus_alone" in row else ""
        print(f"{name:<14} {s['mean']:6.2f} ± {s['std']:.2f} (n={s['n']}){extra}")


if __name__ == "__main__":
    main()
