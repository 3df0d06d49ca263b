"""Zero-shot cross-lingual transfer (issue 19): fine-tune on English, evaluate on de / fr / es / zh.

Per model and seed: XNLI and PAWS-X by k-fold cross-validation **by row** on the parallel dev
files (the same row ids held out in every language, training on the English rows of the other
folds, the best step chosen on a stratified 10% slice of those English training rows, whole
sentence groups; every row predicted once per language, accuracy pooled over the folds), and
SST-2 (train; dev chooses) -> ChnSentiCorp test. ``--init random`` fine-tunes the same
architecture and tokenizer from random weights (the no-pretraining baseline). Finished folds are
reused (``<out-dir>/.../xlingual.json``) when they were made with the same settings and model
weights (others are refused), so an interrupted table resumes. Prints a table and writes a JSON
with the mean and sample standard deviation over seeds per task and language.

    python benchmarks/xlingual_zero_shot.py --model runs/bert-mini-multilingual --seeds 1 2 3 \
        --out benchmarks/results/xlingual_zero_shot_multilingual.json
    python benchmarks/xlingual_zero_shot.py --model runs/bert-mini --seeds 1 2 3 --out ...english.json
    python benchmarks/xlingual_zero_shot.py --model runs/bert-mini-multilingual --init random --seeds 1 2 3 --out ...

Smoke test on a tiny slice (seconds; not a result): ``--smoke`` keeps 60 rows per task, 2 folds,
one epoch, 32-token inputs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import time
from pathlib import Path

from muppets.config import write_json_atomic
from muppets.transfer.finetune import FinetuneConfig
from muppets.transfer.xlingual import LANGUAGES, ParallelTask, load_parallel, sst2_to_chnsenticorp, zero_shot_cv

TASKS = ("xnli", "pawsx", "sst2-chnsenticorp")


def shrink(task: ParallelTask, rows: int) -> ParallelTask:
    """The first ``rows`` English row ids in every language (smoke tests)."""
    keep = set(sorted(task.rows["en"])[:rows])
    return dataclasses.replace(task, rows={lang: {r: ex for r, ex in exs.items() if r in keep}
                                           for lang, exs in task.rows.items()})


def mean_std(values: list[float]) -> dict:
    return {"mean": statistics.mean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "values": values}


def run_task(name: str, cfg: FinetuneConfig, args: argparse.Namespace, seed: int) -> dict:
    root = Path(args.out_dir) / name / f"seed-{seed}"
    seeded = dataclasses.replace(cfg, seed=seed, run_dir=str(root))
    if name == "sst2-chnsenticorp":
        if args.sst2_train_examples:
            seeded = dataclasses.replace(seeded, max_train_examples=args.sst2_train_examples)
        if args.smoke:
            seeded = dataclasses.replace(seeded, max_train_examples=60, max_eval_examples=40)
        return sst2_to_chnsenticorp(seeded)
    task = load_parallel(name, args.languages)
    if args.smoke:
        task = shrink(task, 60)
    return zero_shot_cv(task, seeded, k=args.folds, fold_seed=args.fold_seed, root=root)


def accuracies(name: str, result: dict) -> dict[str, float]:
    if name == "sst2-chnsenticorp":
        # SST-2 dev chose the model: its score is the selection score, not a result
        return {"sst2_dev_selection": result["sst2_dev"].get("accuracy"),
                "zh_test": result["chnsenticorp_test"].get("accuracy")}
    return {lang: r["accuracy"] for lang, r in result["languages"].items()}


def majority(name: str, result: dict) -> dict[str, float]:
    """Chance: the majority class's share per language (ChnSentiCorp test: 608 / 1,200 positive)."""
    if name == "sst2-chnsenticorp":
        return {"zh_test": 608 / 1200}
    return {lang: r["majority"] for lang, r in result["languages"].items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="minilm, an HF BERT directory or a muppets pretraining run")
    ap.add_argument("--init", default="pretrained", choices=["pretrained", "random"])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    ap.add_argument("--languages", nargs="+", default=list(LANGUAGES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--fold-seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=3)
    # bert-mini's fine-tuning recipe in the Chinese masking table (benchmarks/chinese_masking.py)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    # The bert-minis are pretrained MLM-only: [CLS] is never a target and the pooler stays at its
    # random start, so the sentence vector is the mean of the pieces (as in the retrieval analysis)
    ap.add_argument("--pool", default="mean", choices=["first", "mean"])
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-seq-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sst2-train-examples", type=int, default=0, help="first N SST-2 training sentences (0 = all)")
    ap.add_argument("--out-dir", default="", help="run directories (default runs/xlingual/<model name>-<init>)")
    ap.add_argument("--out", required=True, help="JSON results")
    ap.add_argument("--smoke", action="store_true", help="a tiny slice, to check the script runs (not a result)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    default_root = "runs/xlingual-smoke" if args.smoke else "runs/xlingual"  # a smoke run never fills a real one
    args.out_dir = args.out_dir or f"{default_root}/{Path(args.model).name}-{args.init}"
    cfg = FinetuneConfig(model=args.model, init=args.init, epochs=1 if args.smoke else args.epochs, lr=args.lr,
                         batch_size=args.batch_size, max_seq_len=32 if args.smoke else args.max_seq_len,
                         threads=args.threads, precision=args.precision, pool=args.pool, progress=False,
                         eval_every=0)
    if args.smoke:
        args.folds, cfg = 2, dataclasses.replace(cfg, eval_every=1)
    started, results = time.time(), {}
    for name in args.tasks:
        runs = {seed: run_task(name, cfg, args, seed) for seed in args.seeds}
        per_seed = {seed: accuracies(name, r) for seed, r in runs.items()}
        keys = list(next(iter(per_seed.values())))
        results[name] = {"per_seed": per_seed, "majority_class": majority(name, next(iter(runs.values()))),
                         "accuracy": {k: mean_std([100 * per_seed[s][k] for s in args.seeds]) for k in keys}}
    out = {"model": args.model, "init": args.init, "seeds": args.seeds, "folds": args.folds,
           "fold_seed": args.fold_seed, "epochs": cfg.epochs, "lr": cfg.lr, "precision": cfg.precision, "pool": cfg.pool, "batch_size": cfg.batch_size,
           "max_seq_len": cfg.max_seq_len,
           "sst2_train_examples": args.sst2_train_examples, "smoke": args.smoke, "minutes": round((time.time() - started) / 60, 1),
           "results": results}
    write_json_atomic(Path(args.out), out)
    for name, r in results.items():
        print(name, "  ".join(f"{k} {v['mean']:.1f}±{v['std']:.1f}" for k, v in r["accuracy"].items()))
    print(json.dumps({"out": args.out, "minutes": out["minutes"]}))


if __name__ == "__main__":
    main()
