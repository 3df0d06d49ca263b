"""Choose the length of a TAPT run on the selection split, then report the chosen one (issue 16).

Each candidate is one output of ``tapt_table.py``: one continued-pretraining run (one length),
fine-tuned with the same seeds and paired with the same direct arm. The candidate whose
fine-tuning scores best on the selection split (each seed's ``best_selection_score``: SST-2's
train slice, CoNLL-2003's dev), averaged over the paired seeds, is chosen; ties go to the shorter
run, which costs less. Only the chosen candidate's difference on the reported split is the result.
The others' are printed for the record, but they choose nothing.

    python benchmarks/tapt_length.py benchmarks/results/tapt_minilm_sst2_untied.json \
        benchmarks/results/tapt_minilm_sst2_untied_long.json --out benchmarks/results/tapt_minilm_sst2_length.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def candidate(path: Path) -> dict:
    """One tapt_table record, reduced to what the choice and the report need."""
    record = json.loads(path.read_text())
    seeds = [int(s) for s in record["paired_seeds"]]
    recorded = record["adapted"].get("selection", {})
    selection = {int(k): v["score"] for k, v in recorded.items()}
    missing = [s for s in seeds if s not in selection]
    if missing:
        raise SystemExit(f"{path}: no selection score for seed(s) {missing}; write the record again with tapt_table.py")
    chosen_on = {v["split"] for v in recorded.values()}
    return {"record": str(path), "steps": record["pretrain"]["steps"],
            "train_minutes": record["pretrain"]["train_minutes"], "split": record["split"],
            "metric": record["metric"], "seeds": seeds, "selection_split": sorted(chosen_on),
            "direct": {int(k): v for k, v in record["direct"]["per_seed"].items() if int(k) in seeds},
            "selection_mean": statistics.mean(selection[s] for s in seeds),
            "selection_per_seed": [selection[s] for s in seeds],
            "difference_mean_std": record["difference_mean_std"], "difference_t95": record["difference_t95"],
            "adapted_mean_std": record["adapted_mean_std"], "direct_mean_std": record["direct_mean_std"]}


def choose(candidates: list[dict]) -> dict:
    """The candidate with the best mean selection score (the shorter run on a tie). Refuses
    candidates that are not paired alike: another split or metric, other seeds, another direct arm."""
    first = candidates[0]
    for c in candidates[1:]:
        for key in ("split", "metric", "seeds", "direct", "selection_split"):
            if c[key] != first[key]:
                raise SystemExit(f"{c['record']} and {first['record']} differ in {key} "
                                 f"({c[key]} vs {first[key]}): they are not one choice")
    return max(candidates, key=lambda c: (c["selection_mean"], -c["steps"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="+", help="tapt_table.py outputs, one per TAPT length")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    candidates = sorted((candidate(Path(p)) for p in args.records), key=lambda c: c["steps"])
    chosen = choose(candidates)
    result = {"date": time.strftime("%Y-%m-%d"), "chosen": chosen["record"], "chosen_steps": chosen["steps"],
              "reported_split": chosen["split"], "metric": chosen["metric"],
              "selection_split": chosen["selection_split"],
              "difference_mean_std": chosen["difference_mean_std"], "difference_t95": chosen["difference_t95"],
              "candidates": candidates}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"selection split {', '.join(chosen['selection_split'])}; reported {chosen['split']} {chosen['metric']}")
    for c in candidates:
        mark = "chosen" if c is chosen else "      "
        d = c["difference_mean_std"]
        print(f"{mark} {c['steps']:>5} steps ({c['train_minutes']} min): selection {c['selection_mean']:.2f} "
              f"{[round(v, 2) for v in c['selection_per_seed']]}; reported − direct {d[0]:+.2f} ± {d[1]:.2f}")


if __name__ == "__main__":
    main()
