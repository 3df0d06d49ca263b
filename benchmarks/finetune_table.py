"""Collect the fine-tuning runs' ``summary.json`` files into one results table (markdown + JSON).

Runs are ``runs/ft-<task>-<backbone>`` as ``benchmarks/finetune_table.sh`` writes them. Each
cell is mean ± sample std over the seeds, in percent; ``(n=1)`` marks a single seed.

    python benchmarks/finetune_table.py --out benchmarks/results/finetune_table.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# task -> (split, [metric keys], label)
TASKS = {
    "sst2": ("dev", ["accuracy"], "SST-2 dev acc"),
    "cola": ("dev", ["mcc"], "CoLA dev MCC"),
    "mrpc": ("dev", ["f1", "accuracy"], "MRPC dev F1 / acc"),
    "stsb": ("dev", ["pearson", "spearman"], "STS-B dev Pearson / Spearman"),
    "rte": ("dev", ["accuracy"], "RTE dev acc"),
    "conll2003": ("test", ["f1"], "CoNLL-2003 test entity F1"),
    "squad": ("dev", ["exact_match", "f1"], "SQuAD split (dev articles) EM / F1"),
    "hellaswag": ("dev", ["accuracy"], "HellaSwag (our dev split) acc"),
}
BACKBONES = ["minilm", "minilm-mean", "bert-mini-4", "bert-mini-4-mean", "bert-mini-4-lr3e-4", "bert-mini",
             "bert-mini-2", "random", "random-bf16", "random-mean", "gpt-mini", "gpt-mini-nolm", "ablation-bert", "ablation-gpt"]


def cell(summary: dict | None, split: str, keys: list[str], scale: float = 100.0) -> str:
    if summary is None or split not in summary:
        return "—"
    parts = []
    for k in keys:
        stats = summary[split].get(k)
        if stats is None:
            parts.append("?")
            continue
        n = len(stats["values"])
        mean, std = scale * stats["mean"], scale * stats["std"]
        parts.append(f"{mean:.2f} ± {std:.2f}" if n > 1 else f"{mean:.2f} (n=1)")
    return " / ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=Path, default=Path("runs"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--columns", help="comma-separated backbones to print (default: every one with results)")
    args = ap.parse_args()
    found: dict[str, dict[str, dict]] = {}
    for task in TASKS:
        for b in BACKBONES:
            path = args.runs / f"ft-{task}-{b}" / "summary.json"
            if path.is_file():
                found.setdefault(task, {})[b] = json.loads(path.read_text())
    cols = [b for b in BACKBONES if any(b in v for v in found.values())]
    if args.columns:
        cols = [b for b in args.columns.split(",") if b in cols]
    print("| task | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for task, (split, keys, label) in TASKS.items():
        print(f"| {label} | " + " | ".join(cell(found.get(task, {}).get(b), split, keys) for b in cols) + " |")
    if args.out:
        args.out.write_text(json.dumps(found, indent=2) + "\n")


if __name__ == "__main__":
    main()
