"""Paired table of continued pretraining (TAPT / DAPT) then fine-tuning vs fine-tuning directly.

Reads finished runs (the commands are in BENCHMARKS.md, issue 16): the continued-pretraining run
(its summary.json and log.jsonl: held-out MLM accuracy, wall time), and the per-seed
``metrics.json`` of the two fine-tuning directories. Prints the table and writes a JSON.

    python benchmarks/tapt_table.py --pretrain runs/tapt-minilm-conll2003 \
        --direct runs/ft-conll2003-minilm-unsorted --adapted runs/ft-conll2003-minilm-tapt \
        --split test --metric f1 --out benchmarks/results/tapt_minilm_conll2003.json

``--direct-recorded`` takes the direct arm's per-seed scores from an earlier output of this script
(fine-tuning is deterministic per seed on one thread), so a new adapted checkpoint is paired with
them without fine-tuning the original model again. Every seed that also has a run under
``--direct`` must equal the recorded score, or the table is refused: at least one re-run seed
checks that the recorded arm still reproduces with the current code.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

from paired import t_interval, with_recorded


def seed_metrics(directory: Path) -> dict[int, dict]:
    """``{seed: metrics.json}`` of the fine-tuning runs under ``directory`` (``seed-N/``)."""
    return {int(path.parent.name.split("-")[1]): json.loads(path.read_text())
            for path in sorted(directory.glob("seed-*/metrics.json"))}


def seed_scores(runs: dict[int, dict], split: str, metric: str) -> dict[int, float]:
    return {seed: 100 * float(m[split][metric]) for seed, m in runs.items() if split in m and metric in m[split]}


def selection_scores(runs: dict[int, dict]) -> dict[int, dict]:
    """Each seed's score on the split its best epoch was chosen on (a train slice, or CoNLL's dev):
    the score on which a TAPT setting (its length, say) may be chosen, since the reported split
    never may."""
    return {seed: {"split": m.get("selection"), "score": 100 * float(m["best_selection_score"])}
            for seed, m in runs.items() if "best_selection_score" in m}


def recorded_direct(path: Path, rerun: dict[int, float], metric: str) -> dict[int, float]:
    """The recorded direct scores, checked against the re-run seeds (which must all match). Reads this
    script's output, or the first SST-2 TAPT record (2026-11-24), whose ``finetune.minilm`` maps each
    seed to its metrics (fractions)."""
    earlier = json.loads(path.read_text())
    if "direct" in earlier:
        recorded = {int(k): float(v) for k, v in earlier["direct"]["per_seed"].items()}
    else:
        recorded = {int(k): 100 * float(v[metric]) for k, v in earlier["finetune"]["minilm"].items()}
    if not set(rerun) & set(recorded):
        raise SystemExit(f"--direct-recorded {path}: no recorded seed was re-run under --direct, so nothing "
                         "checks that the recorded scores reproduce with the current code")
    try:
        return with_recorded(recorded, rerun, f"--direct-recorded {path}")
    except ValueError as e:
        raise SystemExit(str(e)) from None


def pretrain_facts(run: Path) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    rows = [json.loads(line) for line in open(run / "log.jsonl") if line.strip()]
    steps = [r for r in rows if "elapsed_s" in r]
    evals = [{k: r[k] for k in r if k == "step" or k.startswith("eval/mlm")} for r in rows if "eval/mlm_accuracy" in r]
    return {"steps": summary["step"], "train_minutes": round(steps[-1]["elapsed_s"] / 60, 1) if steps else None,
            "final_eval": summary["eval"], "unigram_baseline": summary.get("unigram_baseline"),
            "eval_curve": evals, "tokens": summary.get("tokens"), "documents": summary.get("documents")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pretrain", required=True, help="the continued-pretraining run directory")
    ap.add_argument("--direct", required=True, help="fine-tuning runs of the original checkpoint (seed-N/)")
    ap.add_argument("--adapted", required=True, help="fine-tuning runs of the adapted checkpoint (seed-N/)")
    ap.add_argument("--direct-recorded", default="", help="an earlier output of this script: its direct "
                    "arm's per-seed scores, checked against the seeds re-run under --direct")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--metric", default="accuracy")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    direct = seed_scores(seed_metrics(Path(args.direct)), args.split, args.metric)
    rerun = sorted(direct)
    if args.direct_recorded:
        direct = recorded_direct(Path(args.direct_recorded), direct, args.metric)
    adapted_runs = seed_metrics(Path(args.adapted))
    adapted = seed_scores(adapted_runs, args.split, args.metric)
    chosen_on = selection_scores(adapted_runs)
    seeds = sorted(set(direct) & set(adapted))
    diffs = [adapted[s] - direct[s] for s in seeds]

    def ms(values: list[float]) -> list[float]:
        return [statistics.mean(values), statistics.stdev(values) if len(values) > 1 else math.nan]

    result = {
        "date": time.strftime("%Y-%m-%d"), "split": args.split, "metric": args.metric,
        "pretrain": {"run": args.pretrain, **pretrain_facts(Path(args.pretrain))},
        "direct": {"runs": args.direct, "per_seed": direct, "recorded_in": args.direct_recorded or None,
                   "rerun_seeds": rerun}, "adapted": {"runs": args.adapted, "per_seed": adapted,
                                             "selection": chosen_on},
        "paired_seeds": seeds,
        "direct_mean_std": ms([direct[s] for s in seeds]) if seeds else None,
        "adapted_mean_std": ms([adapted[s] for s in seeds]) if seeds else None,
        "difference_mean_std": ms(diffs) if seeds else None, "difference_t95": t_interval(diffs),
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"{args.split} {args.metric}: seeds {seeds}")
    print("direct ", [round(direct[s], 2) for s in seeds], result["direct_mean_std"])
    print("adapted", [round(adapted[s], 2) for s in seeds], result["adapted_mean_std"])
    if chosen_on:
        values = [v["score"] for v in chosen_on.values()]
        print(f"adapted on the selection split ({next(iter(chosen_on.values()))['split']}):",
              [round(v, 2) for v in values], ms(values))
    print("diff   ", [round(d, 2) for d in diffs], result["difference_mean_std"], "t95", result["difference_t95"])


if __name__ == "__main__":
    main()
