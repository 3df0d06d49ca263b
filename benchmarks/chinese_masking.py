"""Chinese masking levels at fixed compute (issue 19): piece vs whole word vs ERNIE vs no pretraining.

Every pretrained variant is ``configs/bert-mini-chinese.yaml`` (bert-mini, the bert-base-chinese
vocabulary, the shared Chinese Wikipedia) with the same steps, batch, schedule and thread count;
only ``data.masking.level`` differs, and all read ONE prepared corpus whose masking units (jieba
words, noun-phrase chunks, article-title entities) were stored once, so the token stream is the
same. Variants:

* ``piece``      — single pieces (characters): BERT's own Chinese masking;
* ``whole_word`` — jieba words (Chinese-BERT-wwm);
* ``ernie``      — ``level=mixture``: pieces, words, phrases and entities drawn alike per
  sequence (ERNIE 1.0's three levels; it published no mixing ratio);
* ``none``       — no pretraining: the same architecture and vocabulary, weights drawn afresh;
* ``simplified`` — ``piece`` with every text converted to Simplified script first
  (``tokenizer.chinese_script=simplified``: the corpus, which mixes scripts, and later every
  task input), on its own prepared corpus: is converting worth it? (paired with ``piece``).

Every pretrained model is also scored on the same held-out text masked at each level (piece,
whole word, phrase, entity: ``cross_eval``), since each run's own log scores its own level only.
Then each model is fine-tuned on ChnSentiCorp (accuracy), MSRA NER (entity F1) and CMRC 2018
(CMRC's EM / F1), the same settings for every variant, one thread, seeds paired across variants.
Every task selects its best epoch on its own dev split and reports test (MSRA's dev is a held-out
slice of its training file; CMRC's splits are by article: ``muppets.tasks.chinese``).

    OMP_NUM_THREADS=1 python benchmarks/chinese_masking.py --parallel 2 [--pretrain-steps N]
    python benchmarks/chinese_masking.py --table-only

Runs live in ``runs/zh/``; a finished run (a pretraining's ``summary.json`` unless a signal stopped it,
a seed's ``metrics.json``) is reused, and a killed pretraining resumes from its last checkpoint, so
the same command continues an interrupted table. Jobs run ``--parallel`` at a time: a variant's
fine-tuning starts as soon as its own pretraining ends, seed 1 of every task and variant before seed 2.
``--smoke`` runs the whole chain in minutes on tiny settings in ``runs/zh-smoke/`` (not a result).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import (pretraining_done, pretraining_rows, run_logged, schedule, step_budget,  # noqa: E402
                  table_arguments, table_paths, write_results)
from paired import paired, summary, with_recorded  # noqa: E402
from tapt_table import pretrain_facts  # noqa: E402

CONFIG = "configs/bert-mini-chinese.yaml"
VARIANTS: dict[str, list[str]] = {
    "piece": ["data.masking.level=piece"],
    "whole_word": ["data.masking.level=whole_word"],
    "ernie": ["data.masking.level=mixture"],
    "none": [],  # fine-tuned from random weights of the piece model's architecture
    "simplified": ["data.masking.level=piece", "tokenizer.chinese_script=simplified"],
}
EVAL_LEVELS = ("piece", "whole_word", "phrase", "entity")  # cross_eval: the held-out text masked each way
SCRIPT_CORPUS = {"simplified": "corpus-simplified"}  # variants whose tokenizer converts: their own corpus
TASKS: dict[str, dict[str, Any]] = {  # reported split test; metric -> factor to points
    "chnsenticorp": {"metrics": {"accuracy": 100}, "overrides": ["max_seq_len=256"]},
    # MSRA's training file (its dev) is 2,319 sentences, 66 steps an epoch: after 3 epochs the
    # held-out slice's F1 was still climbing steeply, so it trains longer (best epoch on the slice)
    "msra-ner": {"metrics": {"f1": 100}, "overrides": ["max_seq_len=256", "epochs=10"]},
    "cmrc2018": {"metrics": {"exact_match": 100, "f1": 100}, "overrides": ["max_seq_len=384", "doc_stride=128"]},
}
FINETUNE = ["lr=1e-4", "epochs=3", "batch_size=32", "threads=1", "precision=bf16", "progress=false"]
log = logging.getLogger("chinese_masking")


def muppets(args: list[str], log_to: Path) -> None:
    """One muppets command in a child process (one thread), its output in ``log_to``."""
    run_logged([str(ROOT / ".venv/bin/muppets"), *args], log_to)


def prepare(root: Path, corpus_root: Path, smoke: list[str], variants: list[str]) -> None:
    """The entity lexicon and the prepared corpora with their units, once each, before any run
    starts (the variants share them; two runs must not prepare the same directory at once)."""
    from muppets.data.readers import list_files
    from muppets.data.units import wiki_titles, write_lexicon
    from muppets.paths import resolve_data_path
    from muppets.recipes import bert_pretrain
    from muppets.recipes.common import prepare_once

    for variant in dict.fromkeys("piece" if v == "none" else v for v in variants):  # one per distinct corpus
        cfg = bert_pretrain.load_config(ROOT / CONFIG, [*common_overrides(root, corpus_root, variant),
                                                        *VARIANTS[variant], *smoke])
        lexicon = Path(cfg.corpus.entity_lexicon)
        if not lexicon.is_file():
            n = write_lexicon(wiki_titles(list_files([resolve_data_path(p) for p in cfg.corpus.inputs])), lexicon)
            log.info("entity lexicon: %d article titles -> %s", n, lexicon)
        tok = bert_pretrain.ensure_tokenizer(cfg, Path(cfg.run_dir))
        prepare_once(cfg.corpus, tok, Path(cfg.run_dir))


def common_overrides(root: Path, corpus_root: Path, variant: str) -> list[str]:
    """The variant's prepared corpus and the shared lexicon (under ``corpus_root``) for its runs under ``root``."""
    corpus = corpus_root / SCRIPT_CORPUS.get(variant, "corpus")
    return [f"corpus.prepared={corpus}", f"corpus.entity_lexicon={corpus_root / 'entities.txt'}",
            f"run_dir={root / 'prepare'}"]


def pretrain(variant: str, root: Path, corpus_root: Path, smoke: list[str]) -> Path:
    run = root / f"bert-mini-{variant}"
    if not pretraining_done(run):
        muppets(["pretrain", str(ROOT / CONFIG), *common_overrides(root, corpus_root, variant), f"run_dir={run}", "train.progress=false",
                 *VARIANTS[variant], *smoke], root / f"bert-mini-{variant}.log")
    return run


def ft_name(task: str, variant: str, length: int = 0) -> str:
    """A fine-tuning run's directory name; ``length`` (``--finetune-len``) gets its own runs."""
    return f"ft-{task}-{variant}" + (f"-len{length}" if length else "")


def task_overrides(task: str, length: int = 0) -> list[str]:
    """The task's fine-tuning overrides; with ``length``, every input is cut to that many tokens
    (tagging and QA in more windows; CMRC's windows start every ``length // 4`` tokens)."""
    own = [o for o in TASKS[task]["overrides"] if not length or not o.startswith(("max_seq_len=", "doc_stride="))]
    if not length:
        return own
    return [*own, f"max_seq_len={length}", *([f"doc_stride={length // 4}"] if task == "cmrc2018" else [])]


def finetune(variant: str, task: str, seed: int, root: Path, smoke: list[str], length: int = 0) -> Path:
    """One seed of one task for one variant (``ft-<task>-<variant>[-len<N>]/seed-N``); a finished seed is kept."""
    model = root / ("bert-mini-piece" if variant == "none" else f"bert-mini-{variant}")
    run = root / ft_name(task, variant, length)
    if not (run / f"seed-{seed}" / "metrics.json").is_file():
        init = ["init=random"] if variant == "none" else []
        muppets(["finetune", task, "--seeds", str(seed), f"model={model}", *init, *FINETUNE,
                 *task_overrides(task, length), f"run_dir={run}", *smoke], root / f"{ft_name(task, variant, length)}-{seed}.log")
    return run / f"seed-{seed}"


def cross_eval(root: Path, variants: list[str]) -> dict:
    """Held-out MLM accuracy of every pretrained variant under every masking level: the same
    held-out documents, rate and seeds; only which units are masked changes. A model's own
    level is what its training log reports; the others show what each objective taught (can
    a piece-masked model fill a whole masked word?). Cached in ``<run>/cross_eval.json``."""
    import torch
    from muppets.config import from_dict
    from muppets.interop.hf_bert import load_hf_bert
    from muppets.objectives.mlm_nsp import BertPretrainingData
    from muppets.recipes.bert_pretrain import PretrainConfig, ensure_corpus, ensure_tokenizer, evaluator, special_ids

    torch.set_num_threads(1)
    out: dict[str, dict[str, float]] = {}
    for variant in variants:
        run = root / f"bert-mini-{variant}"
        cache = run / "cross_eval.json"
        if not pretraining_done(run):
            continue
        if cache.is_file():
            out[variant] = json.loads(cache.read_text())
            continue
        cfg = from_dict(PretrainConfig, json.loads((run / "config.json").read_text()))
        tok = ensure_tokenizer(cfg, run)
        corpus = ensure_corpus(cfg, tok, run)
        model = load_hf_bert(run / "final").eval()
        out[variant] = {}
        for level in EVAL_LEVELS:
            data_cfg = dataclasses.replace(cfg.data, masking=dataclasses.replace(cfg.data.masking, level=level))
            data = BertPretrainingData(corpus, special_ids(tok), data_cfg, cfg.train.batch_size,
                                       cfg.train.accumulation, cfg.train.seed, tok.is_continuation)
            with torch.no_grad():
                out[variant][level] = evaluator(data, cfg.eval_batch_size)(model)["mlm_accuracy"]
            log.info("%s on %s-masked held-out text: MLM accuracy %.4f", variant, level, out[variant][level])
        cache.write_text(json.dumps(out[variant], indent=1) + "\n")
    return out


def collect(root: Path, variants: list[str], seeds: list[int], length: int = 0) -> dict:
    """``{task/metric: {variant: {seed: points}}}`` from the finished fine-tuning runs."""
    found: dict[str, dict[str, dict[int, float]]] = {}
    for task, spec in TASKS.items():
        for metric, factor in spec["metrics"].items():
            key = f"{task}/{metric}"
            found[key] = {}
            for variant in variants:
                for seed in seeds:
                    path = root / ft_name(task, variant, length) / f"seed-{seed}" / "metrics.json"
                    if path.is_file():
                        m = json.loads(path.read_text())
                        found[key].setdefault(variant, {})[seed] = factor * float(m["test"][metric])
    return found


def add_recorded(found: dict, pretraining: dict, cross: dict, path: Path) -> list[str]:
    """Complete this run's ``found`` / ``pretraining`` / ``cross_eval`` with an earlier output of
    this script (``--recorded``), for runs no longer on disk; returns the recorded variants
    whose pretraining was not run again (their new seeds could not be checked).

    A later seed pairs with the earlier ones only if it fine-tunes the same model, so every
    variant pretrained again must reproduce its recorded held-out MLM curve and cross-evaluation
    exactly (pretraining is deterministic on one thread), and every seed fine-tuned again must
    reproduce its recorded test score; otherwise ``ValueError``, and nothing is merged."""
    recorded = json.loads(path.read_text())
    rerun = set(pretraining) & set(recorded["pretraining"])
    for variant, facts in pretraining.items():
        old = recorded["pretraining"].get(variant)
        if old is None:
            continue
        if [(e["step"], round(e["eval/mlm_accuracy"], 12)) for e in facts["eval_curve"]] != \
                [(e["step"], round(e["eval/mlm_accuracy"], 12)) for e in old["eval_curve"]]:
            raise ValueError(f"--recorded {path}: {variant} pretrained again does not reproduce its recorded "
                             "held-out MLM curve, so its new seeds would fine-tune a different model")
        for level, acc in cross.get(variant, {}).items():
            if abs(acc - recorded.get("cross_eval", {}).get(variant, {}).get(level, acc)) > 1e-12:
                raise ValueError(f"--recorded {path}: {variant} pretrained again scores {acc} on {level}-masked "
                                 "held-out text, not its recorded score")
    merged = {}
    for key, rows in recorded["table"].items():
        merged[key] = dict(found.get(key, {}))
        for variant, entry in rows.items():
            merged[key][variant] = with_recorded(dict(zip(entry["seeds"], entry["values"])),
                                                 found.get(key, {}).get(variant, {}), f"--recorded {path}, {key} {variant}")
    found.update(merged)
    for mine, theirs in ((pretraining, recorded["pretraining"]), (cross, recorded.get("cross_eval", {}))):
        joined = {**theirs, **mine}
        mine.clear()
        mine.update(sorted(joined.items(), key=lambda kv: list(VARIANTS).index(kv[0])))  # rows in variant order
    return sorted(v for v in recorded["pretraining"] if v not in rerun)


def table(found: dict) -> dict:
    """Per task/metric and variant: mean ± std, and paired differences to ``none`` and ``piece``."""
    out: dict[str, Any] = {}
    for key, rows in found.items():
        out[key] = {}
        for variant, by_seed in sorted(rows.items(), key=lambda kv: list(VARIANTS).index(kv[0])):
            entry = summary(by_seed)
            for base in ("none", "piece"):
                diff = paired(by_seed, rows.get(base, {})) if variant != base else None
                if diff:
                    entry[f"vs_{base}"] = diff
            out[key][variant] = entry
    return out


def markdown(result: dict) -> str:
    lines = ["| task (test) | variant | mean ± std | seeds | − none (paired) | − piece (paired) |",
             "|---|---|---|---|---|---|"]
    for key, rows in result["table"].items():
        for variant, e in rows.items():
            cells = []
            for base in ("none", "piece"):
                p = e.get(f"vs_{base}")
                cells.append(f"{p['mean']:+.2f} ± {p['std']:.2f} ({p['wins']}-{p['losses']})" if p else "—")
            seeds = ",".join(map(str, e["seeds"]))
            lines.append(f"| {key} | {variant} | {e['mean']:.2f} ± {e['std']:.2f} | {seeds} | {cells[0]} | {cells[1]} |")
    lines += ["", *pretraining_rows(result["pretraining"])]
    if result.get("cross_eval"):
        lines += ["", "| held-out MLM accuracy, text masked by → | " + " | ".join(EVAL_LEVELS) + " |",
                  "|---|" + "---|" * len(EVAL_LEVELS)]
        for variant, acc in result["cross_eval"].items():
            lines.append(f"| {variant} | " + " | ".join(f"{100 * acc[lv]:.2f}%" for lv in EVAL_LEVELS) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--corpus-root", default="", help="where the prepared corpus and the lexicon are (default: --root)")
    ap.add_argument("--finetune-len", type=int, default=0,
                    help="fine-tune every task at this many tokens (the pretraining's 128: no untrained positions), "
                         "in its own runs and results file; 0 = each task's own length")
    ap.add_argument("--recorded", default="", help="an earlier output of this script: its per-seed scores, "
                    "pretraining facts and cross-evaluation complete this table (for runs gone from disk); "
                    "a model pretrained again and a seed run again must reproduce them exactly")
    table_arguments(ap, "runs/zh")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    length = args.finetune_len
    root, out = table_paths(args, "runs/zh", "benchmarks/results/chinese_masking"
                            + (f"_len{length}" if length else "") + ".json")
    corpus_root = (ROOT / args.corpus_root).resolve() if args.corpus_root else root
    smoke_pt = ["train.steps=20", "train.warmup_steps=2", "train.eval_every=10", "train.checkpoint_every=10",
                "data.eval_examples=64"] if args.smoke else []
    budget = step_budget(args.pretrain_steps)
    smoke_ft = ["epochs=1", "max_train_examples=64", "max_eval_examples=32"] if args.smoke else []
    start = time.time()
    pretrained = [v for v in args.variants if v != "none"]
    if not args.table_only:
        prepare(root, corpus_root, smoke_pt, args.variants)
        # "none" takes its architecture and tokenizer from the piece run
        to_pretrain = [*pretrained, *(["piece"] if "none" in args.variants and "piece" not in pretrained else [])]
        jobs: list[tuple[str, Callable[[], Any], list[str]]] = [
            (f"pretrain {v}", partial(pretrain, v, root, corpus_root, [*budget, *smoke_pt]), []) for v in to_pretrain]
        jobs += [(f"{t} {v} seed {s}", partial(finetune, v, t, s, root, smoke_ft, length),
                  [f"pretrain {'piece' if v == 'none' else v}"])
                 for s in args.seeds for t in args.tasks for v in args.variants]  # seed 1 of everything first
        schedule(jobs, args.parallel)
    facts = {v: pretrain_facts(root / f"bert-mini-{v}") for v in pretrained if pretraining_done(root / f"bert-mini-{v}")}
    cross, found = cross_eval(root, pretrained), collect(root, args.variants, args.seeds, length)
    unchecked = add_recorded(found, facts, cross, Path(args.recorded)) if args.recorded else []
    result = {"config": CONFIG, "pretrain_overrides": budget, "finetune": FINETUNE,
              "tasks": {t: {**TASKS[t], "overrides": task_overrides(t, length)} for t in args.tasks},
              "seeds": sorted({s for rows in found.values() for by_seed in rows.values() for s in by_seed}),
              "smoke": args.smoke, "wall_s": time.time() - start, "recorded": args.recorded or None, "recorded_not_repretrained": unchecked,
              "pretraining": facts, "cross_eval": cross, "table": table(found)}
    write_results(out, result, markdown(result))


if __name__ == "__main__":
    main()
