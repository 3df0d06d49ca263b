"""SST-2 sentiment from labeling functions alone (issue 17's second task): no SST-2 label is
used to write, tune or select anything; the GLUE dev set (872) is the test set here.

**LFs** — ``examples/weak/sst2_lfs.py`` (a hand-written opinion lexicon, negation-aware
scoring, the "A but B" contrast rule, film-criticism phrase patterns) plus a zero-shot GPT
prompt (``"Review: {text}\\nSentiment:"`` → `` positive`` / `` negative``, contextual
calibration, margin 0.5 nat fixed a priori; ``--gpt-model``, default ``runs/gpt-mini/final``,
any HF GPT-2 directory works; ``--no-zero-shot`` leaves it out) and a prototype LF: the
all-MiniLM-L6-v2 sentence vector (mean-pooled top layer) compared by cosine with four written
positive and four negative review sentences (``PROTOTYPES``), voting where the two classes'
mean similarities differ by at least the median difference over train's sentences (a
label-free margin: it votes on the half of train it is surest of; ``--no-prototypes``).
Not allowed and not used: a
model fine-tuned on SST-2, and the MR corpus (``sentiment/mr``): SST was built from the same
Rotten Tomatoes snippets, so its labels are SST's labels.

**Label model** — our ``LabelModel`` (defaults: class balance learned) fitted on train's matrix
(6,920 sentences; their labels unused); the same with the class balance fixed uniform
(Snorkel's default; row ``soft-uniform``: with no labels there is nothing to choose between the
two on, so both are reported); ``MajorityVote`` beside them.

**End model** — MiniLM (``model=minilm``) fine-tuned on the label model's probabilities for the
train sentences some LF labels (soft cross-entropy), lr 5e-5, 3 epochs, batch 32,
max_seq_len 128; with no labels to select on, the model after the last epoch is kept
(``selection=last``); 3 seeds, dev accuracy reported (mean ± std). Rows: ``soft``,
``soft-uniform``, ``majority`` (majority-vote labels); ``--rows`` adds ``hard`` / ``filtered``
(top prob >= 0.9).
Compared with MiniLM fine-tuned on SST-2's gold train labels, 3 seeds
(``runs/ft-sst2-minilm-sel``: 87.73 ± 0.20), and "gap closed" = (weak - chance) / (supervised -
chance), chance = the dev majority class (50.9%).

    OMP_NUM_THREADS=1 python benchmarks/weak_sst2.py --parallel 2
    OMP_NUM_THREADS=1 python benchmarks/weak_sst2.py --quick           # smoke
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time
from pathlib import Path

import numpy as np

from muppets.tasks import load_task
from muppets.weak import LabelModel, MajorityVote, apply_lfs, load_lfs, prototype_lf, zero_shot_lf
from muppets.weak.matrix import accuracy
from muppets.weak.pipeline import weak_task_data

sys.path.insert(0, str(Path(__file__).resolve().parent))
from weak_runs import (Job, common_arguments, hard_targets, lf_report, paired, run_jobs,  # noqa: E402
                       setup, table, write_json)

ROOT = Path(__file__).resolve().parents[1]
NEG, POS = 0, 1
LABELS = ["0", "1"]
SUPERVISED = {"mean": 87.73, "std": 0.20, "source": "runs/ft-sst2-minilm-sel/summary.json (3 seeds)"}
ROWS = {"soft": (), "majority": (), "hard": (("weak_labels", "hard"),),
        "filtered": (("min_confidence", 0.9),), "soft-uniform": ()}
DATA_OF = {"soft": "soft", "hard": "soft", "filtered": "soft", "majority": "majority",
           "soft-uniform": "soft-uniform"}
PROTOTYPES = {  # written before any SST-2 sentence was looked at
    NEG: ["a terrible movie.", "a boring, awful film.", "i hated this film.",
          "bad acting and a stupid story."],
    POS: ["a great movie.", "an excellent, moving film.", "i loved this film.",
          "wonderful acting and a beautiful story."]}
logger = logging.getLogger("weak_sst2")


def label_free_margin(lf, train: list) -> float:
    """The median gap between the two classes' similarities over train (no labels read)."""
    sims = lf.similarities([ex.text for ex in train])
    return float(np.median(np.abs(sims[:, 1] - sims[:, 0])))


def build_lfs(args: argparse.Namespace, train: list) -> list:
    lfs = load_lfs(ROOT / "examples/weak/sst2_lfs.py")
    if not args.no_prototypes:
        margin = label_free_margin(prototype_lf("prototypes", args.encoder, PROTOTYPES), train)
        logger.info("prototype LF margin (median gap over train): %.4f", margin)
        lfs.append(prototype_lf("prototypes", args.encoder, PROTOTYPES, margin=margin))
    if not args.no_zero_shot:
        lfs.append(zero_shot_lf("zero_shot_gpt", args.gpt_model, "Review: {text}\nSentiment:",
                                {NEG: " negative", POS: " positive"}, margin=0.5, calibrate=True))
    return lfs


def supervised_figure() -> dict:
    path = ROOT / "runs/ft-sst2-minilm-sel/summary.json"
    if path.is_file():
        acc = json.loads(path.read_text())["dev"]["accuracy"]
        return {"mean": 100 * acc["mean"], "std": 100 * acc["std"], "source": str(path.relative_to(ROOT))}
    return SUPERVISED


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common_arguments(parser, [1, 2, 3], ROOT)
    parser.add_argument("--rows", nargs="+", default=["soft", "soft-uniform", "majority"], choices=list(ROWS))
    parser.add_argument("--no-zero-shot", action="store_true")
    parser.add_argument("--gpt-model", default=str(ROOT / "runs/gpt-mini/final"))
    parser.add_argument("--no-prototypes", action="store_true")
    parser.add_argument("--encoder", default="minilm", help="sentence encoder of the prototype LF")
    args = parser.parse_args()
    setup()
    run_root = Path(args.run_root or ROOT / ("runs/weak-sst2-quick" if args.quick else "runs/weak-sst2"))
    out = Path(args.out or (run_root / "result.json" if args.quick else ROOT / "benchmarks/results/weak_sst2.json"))
    started = time.time()

    data = load_task("sst2")
    train, dev = data["train"], data["dev"]
    if args.quick:
        train, dev, args.seeds = train[:128], dev[:64], args.seeds[:1]
    lfs = build_lfs(args, train)
    t0 = time.process_time()
    L_train = apply_lfs(lfs, train, 2, cache_dir=args.cache_dir, progress=False)
    L_dev = apply_lfs(lfs, dev, 2, cache_dir=args.cache_dir, progress=False)
    lf_cpu = time.process_time() - t0
    gold_dev = np.array([int(ex.label) for ex in dev])
    gold_train = np.array([int(ex.label) for ex in train])  # reported only, never used to choose
    lm, mv = LabelModel(2).fit(L_train), MajorityVote(2).fit(L_train)
    uniform = LabelModel(2, class_balance=np.array([0.5, 0.5])).fit(L_train)
    covered = (L_train != -1).any(axis=1)
    evaluate = {"dev": dev}
    sets = {"soft": weak_task_data("sst2-weak", LABELS, train, lm.predict_proba(L_train), evaluate, covered),
            "majority": weak_task_data("sst2-majority", LABELS, train, hard_targets(mv, L_train),
                                       evaluate, covered),
            "soft-uniform": weak_task_data("sst2-weak-uniform", LABELS, train, uniform.predict_proba(L_train),
                                           evaluate, covered)}
    chance = 100 * max(np.mean(gold_dev == 0), np.mean(gold_dev == 1))
    result = {
        "command": "python benchmarks/weak_sst2.py " + " ".join(sys.argv[1:]),
        "quick": args.quick, "machine": platform.processor() or platform.machine(),
        "lfs": [lf.name for lf in lfs], "lf_apply_cpu_s": round(lf_cpu, 1),
        "gpt_model": None if args.no_zero_shot else args.gpt_model,
        "prototype_margin": next((lf.margin for lf in lfs if lf.name == "prototypes"), None),
        "lf_report_dev": lf_report(lfs, L_dev, gold_dev),
        "coverage_any_lf": {"train": float(covered.mean()), "dev": float((L_dev != -1).any(axis=1).mean())},
        "label_model": {"dev_accuracy": lm.score(L_dev, gold_dev),
                        "majority_dev_accuracy": mv.score(L_dev, gold_dev),
                        "uniform_balance_dev_accuracy": uniform.score(L_dev, gold_dev),
                        "class_balance": lm.class_balance_.round(4).tolist(),
                        "fit_residual": getattr(lm, "fit_residual_", None),
                        "train_accuracy_reported_only": accuracy(lm.predict(L_train), gold_train),
                        "train_kept": int(covered.sum())},
        "supervised_dev": supervised_figure(), "chance_dev": chance,
    }
    logger.info("LFs on dev: %s", json.dumps(result["lf_report_dev"]))
    logger.info("label model: %s", json.dumps(result["label_model"]))

    base = dict(model=args.model, lr=5e-5, epochs=1 if args.quick else 3, batch_size=32,
                max_seq_len=64 if args.quick else 128, warmup_ratio=0.1, selection="last",
                threads=1, progress=False, log_every=0, device="cpu")
    jobs = [Job(row, seed, DATA_OF[row],
                str(run_root / row / f"seed-{seed}"), ROWS[row]) for row in args.rows for seed in args.seeds]
    runs = run_jobs(jobs, sets, base, args.parallel, args.resume)
    rows = table(runs, split="dev")
    sup = result["supervised_dev"]["mean"]
    result.update({
        "end_model": base, "table_dev": rows, "paired_dev": paired(runs, "soft", split="dev") if len(rows) > 1 else {},
        "gap_closed": {row: (v["mean"] - chance) / (sup - chance) for row, v in rows.items()},
        "label_model_gap_closed": (100 * result["label_model"]["dev_accuracy"] - chance) / (sup - chance),
        "runs": runs, "wall_s": round(time.time() - started, 1),
        "cpu_s_fine_tuning": round(sum(r["cpu_s"] for r in runs), 1)})
    logger.info("dev: %s", json.dumps(rows, indent=1))
    write_json(out, result)
    logger.info("wrote %s", out)


if __name__ == "__main__":
    main()
