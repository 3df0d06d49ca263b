"""Weak supervision's end model on YouTube spam (issue 17): MiniLM fine-tuned on the label
model's probabilistic labels, against hard, majority-vote and filtered labels and the fully
supervised ceiling.

**Split** — the Snorkel spam tutorial's (``load_spam_tutorial_split``): train = videos 1-4
(1,586 comments; its gold labels are used only by the ``supervised`` row), valid 120 and test
250 from video 5 (stratified, seed 123).

**LFs** — ``examples/weak/spam_model_lfs.py``: the tutorial's 7 deterministic LFs, and in place
of its spaCy/TextBlob LFs two muppets models with thresholds fixed a priori (the tutorial's
0.9 and 20 tokens): ``sentiment_positive`` (MiniLM fine-tuned on SST-2,
``runs/ft-sst2-minilm-sel/seed-1/best``: HAM when P(positive) >= 0.9) and ``has_person``
(MiniLM fine-tuned on CoNLL-2003, ``runs/ft-conll2003-minilm-unsorted/seed-1/best``: HAM when a
comment of < 20 tokens has a word with P(PER) >= 0.9); ``--zero-shot`` adds a calibrated GPT
prompt LF (``runs/gpt-mini/final``, margin 1 nat). The matrix is built once over all 1,956
comments and cached (``--cache-dir``).

**Label models** fitted on train's matrix only: our ``LabelModel`` (defaults) and
``MajorityVote``. As in the tutorial, comments no LF labels are dropped from the end model's
training set (``--keep-uncovered`` keeps them, with the label model's prior).

**Rows** (5 seeds each; a seed fixes the head's initialisation, dropout and batch order):

* ``soft`` — LabelModel probabilities, soft cross-entropy (the expected loss);
* ``hard`` — LabelModel's most likely label;
* ``majority`` — majority-vote labels (ties: the larger learned prior);
* ``filtered`` — ``soft`` keeping only comments whose top probability is >= 0.9 (a priori);
* ``supervised`` — train's gold labels, all 1,586 comments (the ceiling);
* ``soft-selected`` — soft labels of the label model that scores best on valid (comments some
  LF labels) among: ours with the class balance learned, uniform (Snorkel's default), or
  estimated from the tutorial's 100 labelled dev comments, and majority vote. Valid selects,
  test is reported, as for the epoch.

**End model** — ``model=minilm`` (all-MiniLM-L6-v2), lr 5e-5, 3 epochs, batch 32, warmup 10%,
max_seq_len 128 (BERT's recipe as every other MiniLM figure here); the epoch is selected on
valid (``selection=dev``: scored at each epoch end, the best kept), test is reported. Paired
differences: ``soft`` minus each row, seed by seed.

**Leave-one-video-out** (1 seed, ``soft``, ``soft-selected`` and ``supervised``; the fold's
120 selection comments also give the class balance): each video in turn is the test
set; from the other four, a stratified 120 comments (seed 123, as the tutorial's valid) select
the epoch and the rest are train (weak labels from a label model fitted on that train's
matrix, or gold for ``supervised``).

    OMP_NUM_THREADS=1 python benchmarks/weak_end_model.py --parallel 2
    OMP_NUM_THREADS=1 python benchmarks/weak_end_model.py --quick        # smoke: minutes
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import platform
import sys
import time
from pathlib import Path

import numpy as np

from muppets.paths import data_dir
from muppets.tasks.spam import load_spam_tutorial_split
from muppets.tasks.spec import TaskData, TaskSpec
from muppets.tasks.splits import legacy_stratified_shuffle_split
from muppets.weak import LabelModel, MajorityVote, apply_lfs, load_lfs
from muppets.weak.matrix import accuracy
from muppets.weak.pipeline import weak_task_data

sys.path.insert(0, str(Path(__file__).resolve().parent))
from weak_runs import (Job, common_arguments, hard_targets, lf_report, paired, run_jobs,  # noqa: E402
                       setup, table, write_json)

ROOT = Path(__file__).resolve().parents[1]
LABELS = ["0", "1"]  # 0 = ham, 1 = spam
MIN_CONFIDENCE = 0.9  # the filtered row, fixed a priori
logger = logging.getLogger("weak_end_model")


def build_lfs(args: argparse.Namespace) -> list:
    if args.no_model_lfs:
        return load_lfs(ROOT / "examples/weak/spam_lfs.py")
    spec = importlib.util.spec_from_file_location("spam_model_lfs",
                                                  ROOT / "examples/weak/spam_model_lfs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    models = module.model_lfs(args.sst2_model, args.ner_model,
                              args.gpt_model if args.zero_shot else None)
    return [*load_lfs(ROOT / "examples/weak/spam_lfs.py"), *models]


def load_splits(quick: bool) -> dict[str, list]:
    splits = load_spam_tutorial_split(data_dir())
    if quick:  # a smoke run: a slice of each split
        splits = {"train": splits["train"][:96], "dev": [], "valid": splits["valid"][:24],
                  "test": splits["test"][:24]}
    return splits


def gold(examples: list) -> np.ndarray:
    return np.array([int(ex.label) for ex in examples], dtype=np.int64)


def label_models(L: np.ndarray, balance_gold: np.ndarray) -> dict[str, object]:
    """The candidate label models, fitted on train's matrix ``L``: ours with the class balance
    learned, assumed uniform (Snorkel's default), or estimated from the labelled selection rows
    ``balance_gold`` (the tutorial's 100 labelled dev comments); and majority vote."""
    share = float(np.clip(balance_gold.mean(), 0.05, 0.95)) if len(balance_gold) else 0.5  # --quick: no dev
    return {"learned": LabelModel(2).fit(L),
            "uniform": LabelModel(2, class_balance=np.array([0.5, 0.5])).fit(L),
            "labelled-balance": LabelModel(2, class_balance=np.array([1 - share, share])).fit(L),
            "majority": MajorityVote(2).fit(L)}


def choose(models: dict[str, object], L_sel: np.ndarray, g_sel: np.ndarray) -> tuple[str, dict[str, float]]:
    """The candidate with the best accuracy on the selection rows some LF labels (never test)."""
    covered = (L_sel != -1).any(axis=1)
    scores = {name: accuracy(m.predict(L_sel)[covered], g_sel[covered]) for name, m in models.items()}
    return max(scores, key=scores.get), scores


def weak_rows(train: list, L: np.ndarray, evaluate: dict, keep_uncovered: bool,
              selection: tuple[np.ndarray, np.ndarray], balance_gold: np.ndarray
              ) -> tuple[dict[str, TaskData], dict]:
    """The TaskData of every weak row (label models fitted on ``L`` = train's matrix; the
    ``selected`` row's label model chosen on ``selection`` = (valid matrix, valid gold))."""
    models = label_models(L, balance_gold)
    lm, mv = models["learned"], models["majority"]
    chosen, sel_scores = choose(models, *selection)
    keep = None if keep_uncovered else (L != -1).any(axis=1)
    soft = weak_task_data("spam-weak", LABELS, train, lm.predict_proba(L), evaluate, keep)
    majority = weak_task_data("spam-majority", LABELS, train, hard_targets(mv, L), evaluate, keep)
    selected = weak_task_data("spam-selected", LABELS, train, models[chosen].predict_proba(L), evaluate, keep)
    g = gold(train)
    info = {"train_kept": int(len(train) if keep is None else keep.sum()),
            "label_model_train_accuracy": accuracy(lm.predict(L), g),
            "majority_train_accuracy": accuracy(mv.predict(L), g),
            "selected_label_model": chosen, "selection_accuracy": sel_scores,
            "learned_class_balance": [float(x) for x in lm.class_balance_],
            "confident_share": float((lm.predict_proba(L).max(axis=1) >= MIN_CONFIDENCE)[
                keep if keep is not None else slice(None)].mean())}
    return {"weak": soft, "majority": majority, "selected": selected}, info


def supervised(train: list, evaluate: dict) -> TaskData:
    return TaskData(TaskSpec("spam-supervised", "classify", LABELS, "accuracy", ("text",)),
                    {"train": list(train), **evaluate})


ROWS = {  # row -> (data key, FinetuneConfig overrides)
    "soft": ("weak", ()),
    "hard": ("weak", (("weak_labels", "hard"),)),
    "majority": ("majority", ()),
    "filtered": ("weak", (("min_confidence", MIN_CONFIDENCE),)),
    "soft-selected": ("selected", ()),
    "supervised": ("supervised", ()),
}


def lovo_data(all_examples: list, L_all: np.ndarray, video: str, keep_uncovered: bool
              ) -> tuple[dict[str, TaskData], dict]:
    """Leave video ``video`` out: it is test; 120 stratified others select; the rest train."""
    test = [i for i, ex in enumerate(all_examples) if ex.meta["video"] == video]
    pool = [i for i, ex in enumerate(all_examples) if ex.meta["video"] != video]
    n_valid = min(120, len(pool) // 4)
    rest, chosen = legacy_stratified_shuffle_split([all_examples[i].label for i in pool], n_valid, 123)
    train = [pool[i] for i in sorted(rest)]
    evaluate = {"dev": [all_examples[pool[i]] for i in chosen], "test": [all_examples[i] for i in test]}
    train_ex = [all_examples[i] for i in train]
    valid_rows = [pool[i] for i in chosen]
    g_valid = np.array([int(all_examples[i].label) for i in valid_rows])
    data, info = weak_rows(train_ex, L_all[train], evaluate, keep_uncovered, (L_all[valid_rows], g_valid), g_valid)
    return ({f"lovo{video}-weak": data["weak"], f"lovo{video}-selected": data["selected"],
             f"lovo{video}-supervised": supervised(train_ex, evaluate)},
            {"video": video, "train": len(train), "valid": n_valid, "test": len(test), **info})


def base_config(args: argparse.Namespace) -> dict:
    base = dict(model=args.model, lr=5e-5, epochs=3, batch_size=32, max_seq_len=128,
                warmup_ratio=0.1, selection="dev", threads=1, progress=False, log_every=0,
                device="cpu")
    if args.quick:
        base.update(epochs=1, batch_size=16, max_seq_len=64)
    return base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common_arguments(parser, [1, 2, 3, 4, 5], ROOT)
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--no-lovo", action="store_true", help="skip leave-one-video-out")
    parser.add_argument("--lovo-rows", nargs="+", default=["soft", "soft-selected", "supervised"],
                        choices=["soft", "soft-selected", "supervised"])
    parser.add_argument("--keep-uncovered", action="store_true")
    parser.add_argument("--zero-shot", action="store_true", help="add the zero-shot GPT LF")
    parser.add_argument("--no-model-lfs", action="store_true",
                        help="the tutorial's 7 deterministic LFs only (no fine-tuned model needed)")
    parser.add_argument("--sst2-model", default=str(ROOT / "runs/ft-sst2-minilm-sel/seed-1/best"))
    parser.add_argument("--ner-model", default=str(ROOT / "runs/ft-conll2003-minilm-unsorted/seed-1/best"))
    parser.add_argument("--gpt-model", default=str(ROOT / "runs/gpt-mini/final"))
    args = parser.parse_args()
    setup()
    if args.quick:
        args.seeds = args.seeds[:1]
    run_root = Path(args.run_root or ROOT / ("runs/weak-end-model-quick" if args.quick else "runs/weak-end-model"))
    out = Path(args.out or (run_root / "result.json" if args.quick else ROOT / "benchmarks/results/weak_end_model.json"))
    started = time.time()

    splits = load_splits(args.quick)
    lfs = build_lfs(args)
    all_examples = splits["train"] + splits["valid"] + splits["test"]
    t0 = time.process_time()
    L_all = apply_lfs(lfs, all_examples, 2, cache_dir=args.cache_dir, progress=False)
    lf_cpu = time.process_time() - t0
    n_tr, n_va = len(splits["train"]), len(splits["valid"])
    L = {"train": L_all[:n_tr], "valid": L_all[n_tr:n_tr + n_va], "test": L_all[n_tr + n_va:]}
    row_of = {id(ex): i for i, ex in enumerate(splits["train"])}
    L["dev"] = L_all[[row_of[id(ex)] for ex in splits["dev"]]] if splits["dev"] else L_all[:0]
    evaluate = {"dev": splits["valid"], "test": splits["test"]}
    weak, info = weak_rows(splits["train"], L["train"], evaluate, args.keep_uncovered,
                           (L["valid"], gold(splits["valid"])), gold(splits["dev"]))
    data = {**weak, "supervised": supervised(splits["train"], evaluate)}
    lm = LabelModel(2).fit(L["train"])
    result = {
        "command": "python benchmarks/weak_end_model.py " + " ".join(sys.argv[1:]),
        "quick": args.quick, "machine": platform.processor() or platform.machine(),
        "lfs": [lf.name for lf in lfs], "lf_apply_cpu_s": round(lf_cpu, 1),
        "models": {"sst2": args.sst2_model, "ner": args.ner_model,
                   "gpt": args.gpt_model if args.zero_shot else None},
        "lf_report": {s: lf_report(lfs, L[s], gold(splits[s])) for s in ("dev", "valid", "test") if len(L[s])},
        "label_model": {"test_accuracy": lm.score(L["test"], gold(splits["test"])),
                        "valid_accuracy": lm.score(L["valid"], gold(splits["valid"])),
                        "majority_test_accuracy": MajorityVote(2).fit(L["train"]).score(L["test"], gold(splits["test"])),
                        **info},
        "end_model": base_config(args),
    }
    logger.info("LFs on valid: %s", json.dumps(result["lf_report"]["valid"]))
    logger.info("label model: %s", json.dumps(result["label_model"]))

    jobs = [Job(row, seed, ROWS[row][0], str(run_root / row / f"seed-{seed}"), ROWS[row][1])
            for row in args.rows for seed in args.seeds]
    lovo_info = []
    if not args.no_lovo:
        videos = sorted({ex.meta["video"] for ex in all_examples})[:1 if args.quick else None]
        for v in videos:
            lovo, meta = lovo_data(all_examples, L_all, v, args.keep_uncovered)
            data.update(lovo)
            lovo_info.append(meta)
            data_key = {"soft": "weak", "soft-selected": "selected", "supervised": "supervised"}
            jobs += [Job(f"lovo{v}-{kind}", args.seeds[0], f"lovo{v}-{data_key[kind]}",
                         str(run_root / f"lovo{v}-{kind}"), ()) for kind in args.lovo_rows]
    runs = run_jobs(jobs, data, base_config(args), args.parallel, args.resume)
    main_runs = [r for r in runs if not r["row"].startswith("lovo")]
    result.update({
        "table_test": table(main_runs), "table_valid": table(main_runs, split="dev"),
        "paired_test": paired(main_runs, "soft"),
        "lovo": {"protocol": lovo_info, "test": {r["row"]: 100 * r["test"]["accuracy"] for r in runs
                                                 if r["row"].startswith("lovo")}},
        "runs": runs, "wall_s": round(time.time() - started, 1),
        "cpu_s_fine_tuning": round(sum(r["cpu_s"] for r in runs), 1)})
    logger.info("test: %s", json.dumps(result["table_test"], indent=1))
    logger.info("paired: %s", json.dumps(result["paired_test"], indent=1))
    write_json(out, result)
    logger.info("wrote %s", out)


if __name__ == "__main__":
    main()
