"""One cross-validation fold of the zero-shot tables, before and after issue 47's grouped selection slice.

``benchmarks/xlingual_zero_shot.py`` fine-tunes on the English rows of four folds of the XNLI /
PAWS-X dev files and picks the best step on a 10% slice of those rows. Before issue 47 that slice
was drawn row by row, so (XNLI) every selection row shared its premise with training rows: the
selection score was measured on near-copies of the training data. This script runs the same fold
with the same settings under whichever code is on the path and records what the selection saw
(slice size, chosen step, selection score) and the held-out accuracy per language, so the two can
be set side by side:

    OMP_NUM_THREADS=1 python benchmarks/xlingual_selection_leak.py --out after.json
    OMP_NUM_THREADS=1 PYTHONPATH=<checkout before>/src python benchmarks/xlingual_selection_leak.py --out before.json

Settings are those of ``xlingual_zero_shot.py`` (lr 1e-4, 3 epochs, batch 32, 128 tokens, mean
pooling), with float32 (the EPYC here has no native bf16).
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import time
from pathlib import Path

from muppets.config import write_json_atomic
from muppets.transfer.finetune import FinetuneConfig
from muppets.transfer import xlingual


def one_fold(name: str, fold_index: int, cfg: FinetuneConfig, root: Path) -> dict:
    """Run fold ``fold_index`` of task ``name`` (5 folds, fold seed 0) and read what it chose."""
    task = xlingual.load_parallel(name, list(xlingual.LANGUAGES))
    fold = next(f for f in xlingual.cv_splits(task, 5, 0) if f.index == fold_index)
    extra = ()
    if "fingerprint" in inspect.signature(xlingual.run_fold).parameters:  # the repaired code records it
        extra = (xlingual.model_fingerprint(cfg),)
    result = xlingual.run_fold(task, fold, cfg, root, False, *extra)
    metrics = json.loads((root / f"fold-{fold_index}" / "metrics.json").read_text())
    return {"fold": fold_index, "best_step": metrics["best_step"], "steps": metrics["steps"],
            "selection_examples": metrics["selection_examples"], "train_examples": metrics["train_examples"],
            "best_selection_score": metrics["best_selection_score"],
            "accuracy": {lang: r["correct"] / r["total"] for lang, r in result["languages"].items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="+", default=["xnli", "pawsx"])
    ap.add_argument("--fold", type=int, default=0)
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out-dir", default="runs/xlingual-selection-leak")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    started, results = time.time(), {}
    for name in args.tasks:
        root = Path(args.out_dir) / name / f"seed-{args.seed}"
        cfg = FinetuneConfig(model=args.model, epochs=3, lr=1e-4, batch_size=32, max_seq_len=128, threads=1,
                             precision="fp32", pool="mean", progress=False, eval_every=0, seed=args.seed,
                             run_dir=str(root))
        results[name] = one_fold(name, args.fold, cfg, root)
        logging.info("%s: %s", name, json.dumps(results[name]))
    write_json_atomic(Path(args.out), {"model": args.model, "seed": args.seed, "fold": args.fold,
                                       "minutes": round((time.time() - started) / 60, 1), "results": results})


if __name__ == "__main__":
    main()
