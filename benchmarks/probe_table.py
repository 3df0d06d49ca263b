"""The probing table (issue 20): what each layer of MiniLM, our bert-mini, gpt-mini and ELMo knows.

For every model (skipped, with a note, when it is not on disk) ``muppets probe`` runs
(:func:`muppets.analysis.probing.run_probing`, output in ``<runs>/<model>/``): a linear probe
per layer and a scalar-mix probe on CoNLL-2003 POS / chunk / NER and UD EWT UPOS / relation
labels, each chosen on dev and reported on test; control tasks (selectivity) for the model;
the same probes on a randomly initialised encoder of the same architecture; and the structural
probe (UUAS, DSpr. on EWT test) per layer for both. The table collects, per model and task: the
best layer (by dev accuracy) and its test accuracy, its selectivity, the random encoder's best
layer accuracy, the mix accuracy and the expected layer; and the UUAS per layer.

Models (first existing path wins)::

    minilm     all-MiniLM-L6-v2 (the pip package)
    bert-mini  runs/bert-mini-4, runs/bert-mini, runs/bert-mini-fast, runs/abl/fast-lr1e-3-seq64-0
    gpt-mini   runs/gpt-mini
    elmo       runs/elmo-small, runs/elmo
    zh-piece / zh-whole-word / zh-ernie   runs/zh/bert-mini-<level> (benchmarks/chinese_masking.py)

A model whose ``<runs>/<model>/probe.json`` exists with the same settings is read back, not re-run.

    python benchmarks/probe_table.py --threads 2                                   # the full table
    python benchmarks/probe_table.py --models zh-piece,zh-ernie --tasks zh-upos,zh-deprel,zh-structural \\
        --out benchmarks/results/probe_table_zh.json                               # Chinese models, UD GSDSimp
    python benchmarks/probe_table.py --models minilm --max-train-sentences 200 \\
        --max-eval-sentences 100 --epochs 3 --runs /tmp/probe-smoke              # a smoke test
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from muppets.analysis.probing import ProbeConfig, check_report_target, run_probing
from muppets.errors import ConfigError, MuppetsError
from muppets.transfer.embedders import locate_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tables import write_table  # noqa: E402

log = logging.getLogger("probe_table")

CANDIDATES = {
    "minilm": ["minilm"],
    "bert-mini": ["runs/bert-mini-4", "runs/bert-mini", "runs/bert-mini-fast", "runs/abl/fast-lr1e-3-seq64-0"],
    "gpt-mini": ["runs/gpt-mini"],
    "elmo": ["runs/elmo-small", "runs/elmo"],
    # Chinese bert-mini of benchmarks/chinese_masking.py, per masking level (--tasks zh-upos,zh-deprel,zh-structural)
    "zh-piece": ["runs/zh/bert-mini-piece"],
    "zh-whole-word": ["runs/zh/bert-mini-whole_word"],
    "zh-ernie": ["runs/zh/bert-mini-ernie"],
}
ENGLISH_MODELS = ("minilm", "bert-mini", "gpt-mini", "elmo")
WORD_TASKS = ("pos", "chunk", "ner", "upos", "deprel", "zh-upos", "zh-deprel")
TREE_TASKS = {"structural": "EWT", "zh-structural": "GSDSimp"}  # structural probe -> its UD treebank


def find_model(name: str) -> str | None:
    """The first candidate path of ``name`` that is a model (None when none is)."""
    for candidate in CANDIDATES[name]:
        try:
            locate_model(candidate)
        except MuppetsError:
            continue
        return candidate
    return None


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(ENGLISH_MODELS), help="comma-separated: " + ", ".join(CANDIDATES))
    ap.add_argument("--tasks", default="pos,chunk,ner,upos,deprel,structural")
    ap.add_argument("--runs", type=Path, default=Path("runs/probe"), help="per-model output folders")
    ap.add_argument("--cache-dir", default="runs/probe/cache")
    ap.add_argument("--max-train-sentences", type=int, default=0)
    ap.add_argument("--max-eval-sentences", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=20, help="word probes: epochs at most")
    ap.add_argument("--tree-epochs", type=int, default=30, help="structural probe: epochs at most")
    ap.add_argument("--rank", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/probe_table.json"))
    return ap.parse_args()


def config_for(args: argparse.Namespace, name: str, path: str) -> ProbeConfig:
    return ProbeConfig(model=path, tasks=args.tasks, max_train_sentences=args.max_train_sentences,
                       max_eval_sentences=args.max_eval_sentences, max_epochs=args.epochs,
                       tree_epochs=args.tree_epochs, rank=args.rank, seed=args.seed, cache_dir=args.cache_dir,
                       out=str(args.runs / name))


def probe_or_reuse(cfg: ProbeConfig) -> dict:
    """``run_probing``, unless the output folder holds a report of the same settings."""
    done = cfg.out_dir() / "probe.json"
    if done.is_file():
        try:
            check_report_target(cfg)  # the comparison `muppets probe` makes
        except ConfigError:
            pass  # other settings: probed again in this script's own folder
        else:
            log.info("reusing %s", done)
            return json.loads(done.read_text(encoding="utf-8"))
    return run_probing(cfg, overwrite=True)


def summarize(report: dict) -> dict:
    """The table's cells of one model."""
    out = {}
    for task in WORD_TASKS:
        result = report["tasks"].get(task)
        if not result or "pretrained" not in result:
            continue
        best, mix = result["pretrained"]["best_layer"], result["pretrained"].get("mix", {})
        random_best = result.get("random_encoder", {}).get("best_layer", {})
        out[task] = {"best_layer": best["layer"], "accuracy": best["accuracy"],
                     "span_f1": best.get("span_f1"), "selectivity": best.get("selectivity"),
                     "mix_accuracy": mix.get("accuracy"), "expected_layer": mix.get("expected_layer"),
                     "random_accuracy": random_best.get("accuracy"), "random_best_layer": random_best.get("layer"),
                     "random_span_f1": random_best.get("span_f1")}
    for name in TREE_TASKS:
        tree = report["tasks"].get(name, {})
        if "pretrained" in tree:
            out[name] = {enc: [round(r["uuas"], 4) for r in tree[enc]["layers"]]
                         for enc in ("pretrained", "random_encoder") if enc in tree}
            out[name]["dspr"] = [round(r["dspr"], 4) for r in tree["pretrained"]["layers"]]
    return out


def _cell(value: float | None, digits: int = 2, scale: float = 100.0) -> str:
    return "—" if value is None else f"{value * scale:.{digits}f}"


def markdown(table: dict) -> str:
    lines = ["| model | task | best layer (dev) | test acc | span F1 | selectivity | random enc. acc | random enc. F1 "
             "| mix acc | E[layer] |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for model, cells in table["models"].items():
        for task in WORD_TASKS:
            c = cells.get(task)
            if c:
                lines.append(f"| {model} | {task} | {c['best_layer']} | {_cell(c['accuracy'])} | "
                             f"{_cell(c['span_f1'])} | {_cell(c['selectivity'])} | {_cell(c['random_accuracy'])} | "
                             f"{_cell(c.get('random_span_f1'))} | "
                             f"{_cell(c['mix_accuracy'])} | {_cell(c['expected_layer'], 2, 1.0)} |")
    for name, treebank in TREE_TASKS.items():
        trees = {m: c[name] for m, c in table["models"].items() if c.get(name)}
        if trees:
            lines += ["", f"| model | UUAS per layer ({treebank} test) | random encoder | DSpr. per layer |",
                      "|---|---|---|---|"]
        for model, s in trees.items():
            lines.append(f"| {model} | {' / '.join(_cell(v, 1) for v in s['pretrained'])} | "
                         f"{' / '.join(_cell(v, 1) for v in s.get('random_encoder', []))} | "
                         f"{' / '.join(f'{v:.3f}' for v in s['dspr'])} |")
    if table["missing"]:
        lines += ["", "Not run (no model on disk): " + ", ".join(table["missing"])]
    return "\n".join(lines) + "\n"


def start(threads: int) -> None:
    """Log to stderr; ``threads`` torch threads (0: leave as is)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    if threads:
        import torch

        torch.set_num_threads(threads)


def main() -> int:
    args = parse_args()
    start(args.threads)
    table: dict = {"models": {}, "paths": {}, "missing": [], "seconds": {}}
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        path = find_model(name)
        if path is None:
            log.warning("%s: none of %s is a model; skipped", name, ", ".join(CANDIDATES[name]))
            table["missing"].append(f"{name} ({' / '.join(CANDIDATES[name])})")
            continue
        t0 = time.time()
        report = probe_or_reuse(config_for(args, name, path))
        table["paths"][name], table["seconds"][name] = path, time.time() - t0
        table["models"][name] = summarize(report)
        write_table(args.out, table, markdown(table))
    print(write_table(args.out, table, markdown(table)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
