"""The feature-based table (issue 5): frozen backbones + ScalarMix + BiLSTM task models on SST-2
(dev accuracy) and CoNLL-2003 (test entity F1), every variant over seeds, and the learned layer
weights per task as bar charts.

Variants (a variant is skipped, with a note, when its model is missing):

    word2vec          static word2vec vectors                      (--word2vec FILE or run)
    nnlm              the NNLM's embedding rows                    (--nnlm RUN)
    elmo-L0/L1/L2     one ELMo layer alone (token, biLSTM 1, 2)    (--elmo RUN)
    elmo-mix          every ELMo layer, ScalarMix-ed per task
    elmo-mix+w2v      ELMo mix concatenated with word2vec (ELMo §3.3)
    bert-last         the top BERT layer                           (--bert DIR, default minilm)
    bert-last4sum     the last four layers summed (BERT §5.3, Table 7)
    bert-last4cat     the last four layers concatenated
    bert-mix          every BERT layer, ScalarMix-ed per task

The fine-tuned BERT row is read from ``benchmarks/results/finetune_table.json`` (``minilm``) when
it is there; it is not run here. Each run is ``muppets features`` (the library call) in
``<runs>/<task>-<variant>/seed-N``; the embedded features are cached in ``<runs>/cache`` and shared
by every seed and by variants that read the same layers. Results are written after every variant,
so an interrupted table keeps what it has; re-running resumes finished runs from their files.

    python benchmarks/feature_table.py --seeds 1,2,3                       # the full table (hours)
    python benchmarks/feature_table.py --tasks sst2 --only elmo-mix,bert-mix --max-train 500 --seeds 1
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path

from muppets.analysis.layer_weights import plot_layer_weights
from muppets.config import apply_overrides, write_json_atomic
from muppets.errors import MuppetsError
from muppets.tasks import load_task
from muppets.transfer.feature_based import FeatureConfig, run_seeds
from muppets.transfer.finetune import TaskSection

log = logging.getLogger("feature_table")

# task -> (split, metric key, column label)
TASKS = {"sst2": ("dev", "accuracy", "SST-2 dev acc"), "conll2003": ("test", "f1", "CoNLL-2003 test F1")}
# variant -> (model argument, layers, concatenate word2vec?)
VARIANTS = {
    "word2vec": ("word2vec", "0", False), "nnlm": ("nnlm", "0", False),
    "elmo-L0": ("elmo", "0", False), "elmo-L1": ("elmo", "1", False), "elmo-L2": ("elmo", "2", False),
    "elmo-mix": ("elmo", "mix", False), "elmo-mix+w2v": ("elmo", "mix", True),
    "bert-last": ("bert", "last", False), "bert-last4sum": ("bert", "last4sum", False),
    "bert-last4cat": ("bert", "last4cat", False), "bert-mix": ("bert", "mix", False),
}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--elmo", default="runs/elmo-small", help="ELMo run (its final/)")
    ap.add_argument("--bert", default="minilm", help="HF BERT dir, minilm, or a BERT run")
    ap.add_argument("--word2vec", default="runs/word2vec-sg", help="word2vec vectors (file or run; configs/word2vec-sg.yaml trains it)")
    ap.add_argument("--nnlm", default="runs/nnlm-small", help="NNLM run (configs/nnlm-small.yaml)")
    ap.add_argument("--tasks", default="sst2,conll2003")
    ap.add_argument("--only", help="comma-separated variants (default: all)")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--runs", type=Path, default=Path("runs/features"), help="run directories and the cache")
    ap.add_argument("--max-train", type=int, default=0, help="first N training sentences only (0 = all)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads per run")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/feature_table.json"))
    ap.add_argument("--finetuned", type=Path, default=Path("benchmarks/results/finetune_table.json"))
    ap.add_argument("--fresh", action="store_true", help="delete this script's earlier runs of each variant and retrain them")
    ap.add_argument("overrides", nargs="*", help="FeatureConfig key=value for every run, e.g. epochs=5 hidden=256")
    return ap.parse_args()


def available(args: argparse.Namespace) -> dict[str, str | None]:
    """Model argument -> its path, or None when it is not there (``minilm`` needs its package)."""
    from muppets.transfer.embedders import locate_model

    out = {}
    for name in ("elmo", "bert", "word2vec", "nnlm"):
        value = getattr(args, name)
        try:
            locate_model(value)
            out[name] = value
        except MuppetsError as err:
            log.warning("%s model %s not available (%s): its variants are skipped", name, value, err)
            out[name] = None
    return out


def run_variant(task: str, variant: str, models: dict, args: argparse.Namespace, data) -> dict | None:
    source, layers, concat = VARIANTS[variant]
    if models[source] is None or (concat and models["word2vec"] is None):
        return None
    cfg = FeatureConfig(task=TaskSection(name=task), model=models[source], layers=layers,
                        static=models["word2vec"] if concat else "", run_dir=str(args.runs / f"{task}-{variant}"),
                        cache_dir=str(args.runs / "cache"), threads=args.threads, max_train_examples=args.max_train,
                        progress=sys.stderr.isatty())
    cfg = apply_overrides(cfg, args.overrides)
    if args.fresh:  # a run never overwrites an earlier one: this script's own runs are removed first
        shutil.rmtree(cfg.run_dir, ignore_errors=True)
    start = time.perf_counter()
    summary = run_seeds(cfg, [int(s) for s in args.seeds.split(",")], resume=not args.fresh, data=data)
    summary["seconds"] = time.perf_counter() - start
    return summary


def cell(summary: dict | None, split: str, key: str) -> str:
    if summary is None or key not in summary.get(split, {}):
        return "—"
    stats = summary[split][key]
    n = len(stats["values"])
    return f"{100 * stats['mean']:.2f} ± {100 * stats['std']:.2f}" if n > 1 else f"{100 * stats['mean']:.2f} (n=1)"


def finetuned_row(path: Path) -> dict[str, dict]:
    """The fine-tuned MiniLM summaries per task, from the fine-tuning table (if it exists)."""
    if not path.is_file():
        return {}
    table = json.loads(path.read_text())
    return {task: table[task]["minilm"] for task in TASKS if "minilm" in table.get(task, {})}


def markdown(results: dict[str, dict[str, dict]], finetuned: dict[str, dict]) -> str:
    tasks = [t for t in TASKS if t in results]
    lines = ["| variant | " + " | ".join(TASKS[t][2] for t in tasks) + " |", "|---|" + "---|" * len(tasks)]
    for variant in VARIANTS:
        if any(variant in results[t] for t in tasks):
            cells = [cell(results[t].get(variant), *TASKS[t][:2]) for t in tasks]
            lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    if finetuned:
        lines.append("| bert fine-tuned (minilm, finetune_table) | "
                     + " | ".join(cell(finetuned.get(t), *TASKS[t][:2]) for t in tasks) + " |")
    return "\n".join(lines)


def plot_mixes(task: str, summaries: dict[str, dict], out: Path) -> Path | None:
    """The learned mixes as one bar chart beside ``out``: ``mix_weights_<task>.png`` for the default
    ``feature_table.json``, else ``<out stem>_mix_<task>.png`` (so a partial rerun keeps the table's plot)."""
    panels = {v: (s["mix"]["labels"], s["mix"]["weights"], s["mix"]["gamma"])
              for v, s in summaries.items() if s is not None and "mix" in s}
    if not panels:
        return None
    name = f"mix_weights_{task}.png" if out.stem == "feature_table" else f"{out.stem}_mix_{task}.png"
    return plot_layer_weights(panels, out.parent / name,
                              title=f"{task}: learned ScalarMix weights (mean over seeds)")


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args()
    models = available(args)
    variants = args.only.split(",") if args.only else list(VARIANTS)
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    results: dict[str, dict[str, dict]] = {}
    finetuned = finetuned_row(args.finetuned)
    for task in args.tasks.split(","):
        data = load_task(task)
        results[task] = {}
        for variant in variants:
            summary = run_variant(task, variant, models, args, data)
            if summary is not None:
                results[task][variant] = summary
                log.info("%s %s: %s", task, variant, cell(summary, *TASKS[task][:2]))
            write_json_atomic(args.out, {"command": " ".join(sys.argv), "models": models, "results": results})
        plot = plot_mixes(task, results[task], args.out)
        if plot:
            log.info("mix weights of %s: %s", task, plot)
    table = markdown(results, finetuned)
    args.out.with_suffix(".md").write_text(table + "\n", encoding="utf-8")
    print(table)


if __name__ == "__main__":
    main()
