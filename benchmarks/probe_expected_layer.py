"""Which layers POS, chunk and NER draw on in MiniLM, by Tenney et al.'s two measures (issue 20).

Tenney, Das & Pavlick (2019), "BERT Rediscovers the Classical NLP Pipeline", order the tasks by
two statistics of the same probes:

* the centre of gravity of the learned scalar-mix weights, ``E_s[l] = Σ_l l · s_l`` (what the
  probing table reports as E[layer]);
* the expected layer of cumulative scoring, ``E_Δ[l] = Σ_l l · Δ(l) / Σ_l Δ(l)``, where
  ``Δ(l)`` is the test gain of a mix over layers ``0..l`` against one over ``0..l-1``: the
  layer at which a task's information appears, rather than the layers the full mix leans on.

For each seed this runs ``muppets probe MODEL --tasks pos,chunk,ner --no-random-baseline
--no-control --cumulative --seed S`` (output in ``<runs>/<model>-<seed>/``; a report of the
same settings is read back) and tabulates both measures per task (``E_Δ`` on accuracy, and on
span F1 for chunk and NER), mean ± std over the seeds, and the mean gain of each layer.

    python benchmarks/probe_expected_layer.py --threads 1                  # MiniLM, seeds 0 1 2
    python benchmarks/probe_expected_layer.py --max-train-sentences 200 --max-eval-sentences 100 \\
        --epochs 3 --seeds 0 --runs /tmp/el-smoke --out /tmp/el-smoke/table.json   # a smoke test
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_table import probe_or_reuse, start  # noqa: E402

from muppets.analysis.probing import ProbeConfig  # noqa: E402
from tables import write_table  # noqa: E402

TASKS = ("pos", "chunk", "ner")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="minilm", help="anything `muppets probe` reads (default: all-MiniLM-L6-v2)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--runs", type=Path, default=Path("runs/probe-cumulative"), help="per-seed output folders")
    ap.add_argument("--cache-dir", default="runs/probe/cache")
    ap.add_argument("--max-train-sentences", type=int, default=0)
    ap.add_argument("--max-eval-sentences", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=20, help="word probes: epochs at most")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/probe_expected_layer.json"))
    return ap.parse_args()


def config_for(args: argparse.Namespace, seed: int) -> ProbeConfig:
    name = Path(str(args.model).rstrip("/")).name
    return ProbeConfig(model=args.model, tasks=",".join(TASKS), random_baseline=False, control=False, cumulative=True,
                       max_train_sentences=args.max_train_sentences, max_eval_sentences=args.max_eval_sentences,
                       max_epochs=args.epochs, seed=seed, cache_dir=args.cache_dir,
                       out=str(args.runs / f"{name}-{seed}"))


def measures(report: dict) -> dict:
    """Per task of one report: E_s (mix weights), E_Δ on accuracy (and span F1), the gains."""
    out = {}
    for task in TASKS:
        result = report["tasks"][task]["pretrained"]
        cumulative = result["cumulative"]
        out[task] = {"mix_expected_layer": result["mix"]["expected_layer"],
                     "delta_expected_layer": cumulative["accuracy"]["expected_layer"],
                     "delta": cumulative["accuracy"]["delta"], "layers": cumulative["accuracy"]["layers"],
                     "scores": cumulative["accuracy"]["scores"]}
        if "span_f1" in cumulative:
            out[task].update(delta_expected_layer_f1=cumulative["span_f1"]["expected_layer"],
                             delta_f1=cumulative["span_f1"]["delta"])
    return out


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample std; NaN when a seed's value is undefined (no positive total gain)."""
    if any(math.isnan(v) for v in values):
        return math.nan, math.nan
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def summarize(per_seed: dict[int, dict]) -> dict:
    keys = ("mix_expected_layer", "delta_expected_layer", "delta_expected_layer_f1")
    out = {}
    for task in TASKS:
        rows = [m[task] for m in per_seed.values()]
        out[task] = {k: mean_std([r[k] for r in rows]) for k in keys if all(k in r for r in rows)}
        out[task]["delta"] = [statistics.fmean(d) for d in zip(*(r["delta"] for r in rows))]
        out[task]["layers"] = rows[0]["layers"]
    return out


def markdown(table: dict) -> str:
    seeds = ", ".join(str(s) for s in table["seeds"])

    def cell(value) -> str:
        if value is None:
            return "—"
        return "undefined (no gain)" if math.isnan(value[0]) else f"{value[0]:.2f} ± {value[1]:.2f}"

    lines = [f"| task | E_s[l] (mix weights) | E_Δ[l] (accuracy) | E_Δ[l] (span F1) | mean Δ accuracy per added layer "
             f"(points; seeds {seeds}) |", "|---|---|---|---|---|"]
    for task, s in table["summary"].items():
        gains = " / ".join(f"{l}: {100 * d:+.2f}" for l, d in zip(s["layers"][1:], s["delta"]))
        lines.append(f"| {task} | {cell(s.get('mix_expected_layer'))} | {cell(s.get('delta_expected_layer'))} | "
                     f"{cell(s.get('delta_expected_layer_f1'))} | {gains} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    args = parse_args()
    start(args.threads)
    per_seed = {seed: measures(probe_or_reuse(config_for(args, seed))) for seed in args.seeds}
    table = {"model": args.model, "seeds": args.seeds, "per_seed": per_seed, "summary": summarize(per_seed)}
    print(write_table(args.out, table, markdown(table)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
