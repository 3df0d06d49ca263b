"""Collect the fine-tuning runs' ``summary.json`` files into one table (markdown + JSON).

    python benchmarks/finetune_table.py runs/ft-*-minilm --out benchmarks/results/finetune_table.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = []
    for run in args.runs:
        path = run / "summary.json"
        if path.is_file():
            rows.append({"run": str(run), **json.loads(path.read_text())})
    for r in rows:
        print(r["run"], json.dumps({k: v for k, v in r.items() if k != "run"})[:400])
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
