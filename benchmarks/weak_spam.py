"""Weak supervision on YouTube spam: muppets vs Snorkel 0.10.0 on the same label matrix (issue 17).

Data and split: the Snorkel spam tutorial's exactly (``muppets.tasks.spam.load_spam_tutorial_split``;
checked here row by row against the tutorial's own pandas + scikit-learn code when pandas and
scikit-learn are present): train = videos 1-4 (1,586, labels unused), dev = 100 of them
(labelled, for the LF summary), valid 120 / test 250 from video 5. LFs: the tutorial's seven
deterministic ones (``examples/weak/spam_lfs.py``); its spaCy/TextBlob LFs are left out, so its
published 84.0 / 86.0 (majority vote / LabelModel with 10 LFs) are not the target here: the
comparison is on our 7-LF matrix, both libraries on the same ``L``.

Measured, in one process, on the same matrices:

* LF summary on dev: ours vs ``LFAnalysis(L).lf_summary(Y)`` — asserted identical (every column).
* Majority vote: ours (prior tie-break) vs ``MajorityLabelVoter`` (its ``tie_break_policy=
  "random"``, as the tutorial scores it; and "abstain" counted wrong), test accuracy.
* Snorkel ``LabelModel(cardinality=2).fit(L_train, n_epochs=500, log_freq=100, seed=s)`` for 5
  seeds vs our ``LabelModel`` (deterministic: one fit, timed 5 times), test accuracy and fit
  time (median of 5; both warmed up on a small matrix first so first-use costs are not timed).
* Dawid-Skene (ours).
* Variants of our label model (class balance learned / uniform, abstains as evidence or not,
  the better-than-random guard on / off) on valid and test: the default is fixed a priori; the
  variants show what each choice does. Nothing is selected on test.

Accuracy counts every one of the 250 test comments (a -1 prediction is wrong).

    OMP_NUM_THREADS=1 python benchmarks/weak_spam.py --out benchmarks/results/weak_spam.json
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from muppets.paths import data_dir
from muppets.tasks.spam import load_spam_tutorial_split
from muppets.weak import (DawidSkene, LabelModel, MajorityVote, apply_lfs, lf_summary,
                          load_lfs)
from muppets.weak.matrix import accuracy

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (123, 0, 1, 2, 3)  # the tutorial's seed first
L_NAMES: list[str] = []  # the LF names, for the label model's worst-fitting pair
logger = logging.getLogger("weak_spam")


def check_split_against_tutorial(root: Path, splits: dict) -> tuple[str, dict]:
    """Rebuild the tutorial's frames with its own code path (pandas + scikit-learn) and check
    rows, order, labels and texts; returns what was checked and the tutorial's raw texts."""
    try:
        import pandas as pd
        from sklearn.model_selection import train_test_split
    except ImportError:
        return "not checked (pandas or scikit-learn missing)", {}
    frames = []
    for i, name in enumerate(sorted((root / "youtube-spam").glob("Youtube*.csv")), start=1):
        df = pd.read_csv(name)
        df.columns = [c.lower() for c in df.columns]
        df = df.rename(columns={"class": "label", "content": "text"}).assign(video=i)
        frames.append(df.sample(frac=1, random_state=123).reset_index(drop=True))
    train = pd.concat(frames[:4])
    valid, test = train_test_split(frames[4], test_size=250, random_state=123,
                                   stratify=frames[4].label)
    theirs = {"train": train, "dev": train.sample(100, random_state=123), "valid": valid,
              "test": test}
    for split, df in theirs.items():
        ours = splits[split]
        assert len(ours) == len(df), split
        assert [int(e.label) for e in ours] == df.label.tolist(), split
        assert [e.text for e in ours] == [t.strip() for t in df.text], split
        assert [e.meta["video"] for e in ours] == [str(v) for v in df.video], split
    return ("identical rows, order, labels, texts (pandas' text stripped of outer whitespace)",
            {split: df.text.tolist() for split, df in theirs.items()})


def check_lfs_on_raw_text(lfs, raw: dict, matrices: dict) -> bool:
    """The tutorial's LFs see pandas' text as is; ours see it stripped of outer whitespace.
    Apply our LFs to the unstripped texts too: the matrices must be equal."""
    from muppets.tasks.spec import TextExample

    for split, texts in raw.items():
        examples = [TextExample(str(i), t, None, None, f"{split}:{i}") for i, t in enumerate(texts)]
        assert np.array_equal(apply_lfs(lfs, examples, 2, progress=False), matrices[split]), split
    return True


def summary_parity(L_dev: np.ndarray, Y_dev: np.ndarray, names: list[str]) -> dict:
    from snorkel.labeling import LFAnalysis

    theirs = LFAnalysis(L_dev).lf_summary(Y_dev)
    ours = lf_summary(L_dev, Y_dev, names)
    checks = {
        "polarity": [list(map(int, p)) for p in theirs["Polarity"]] == ours.polarity,
        "coverage": np.array_equal(theirs["Coverage"].to_numpy(), ours.coverage),
        "overlaps": np.array_equal(theirs["Overlaps"].to_numpy(), ours.overlaps),
        "conflicts": np.array_equal(theirs["Conflicts"].to_numpy(), ours.conflicts),
        "correct": np.array_equal(theirs["Correct"].to_numpy(), ours.correct),
        "incorrect": np.array_equal(theirs["Incorrect"].to_numpy(), ours.incorrect),
        "emp_accuracy": np.array_equal(theirs["Emp. Acc."].to_numpy(), ours.emp_accuracy),
    }
    assert all(checks.values()), f"LF summary differs from Snorkel's: {checks}"
    logger.info("LF summary on dev (identical to Snorkel's):\n%s", ours.format())
    return {"identical": True, "columns_checked": checks, "table": ours.rows()}


def covered_accuracy(pred: np.ndarray, L: np.ndarray, gold: np.ndarray) -> float:
    """Accuracy on the rows at least one LF labels (the end model of the tutorial trains on
    those only; on the others every model just states its prior)."""
    covered = (L != -1).any(axis=1)
    return accuracy(pred[covered], gold[covered])


def _timed(fit, repeats: int) -> tuple[object, list[float]]:
    times, model = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        model = fit()
        times.append(time.perf_counter() - start)
    return model, times


def snorkel_runs(L: dict, Y: dict) -> dict:
    from snorkel.labeling.model import LabelModel as SnorkelLabelModel
    from snorkel.labeling.model import MajorityLabelVoter

    warm = SnorkelLabelModel(cardinality=2, verbose=False)
    warm.fit(L["dev"], n_epochs=20, seed=0, progress_bar=False)
    runs = []
    for seed in SEEDS:
        model = SnorkelLabelModel(cardinality=2, verbose=False)
        start = time.perf_counter()
        model.fit(L["train"], n_epochs=500, log_freq=100, seed=seed, progress_bar=False)
        fit_s = time.perf_counter() - start
        runs.append({"seed": seed, "fit_s": fit_s, **{
            f"{split}_accuracy": accuracy(model.predict(L[split], tie_break_policy="random"),
                                          Y[split]) for split in ("valid", "test")},
            "test_accuracy_abstain_as_wrong": accuracy(
                model.predict(L["test"], tie_break_policy="abstain"), Y["test"]),
            "covered_test_accuracy": covered_accuracy(
                model.predict(L["test"], tie_break_policy="random"), L["test"], Y["test"]),
            "weights": model.get_weights().round(4).tolist(),
            "test_predictions": model.predict(L["test"], tie_break_policy="random").tolist()})
    voter = MajorityLabelVoter(cardinality=2)
    return {"label_model": runs, "majority": {
        f"{split}_accuracy_random_tiebreak": accuracy(
            voter.predict(L[split], tie_break_policy="random"), Y[split])
        for split in ("valid", "test")} | {
        "test_accuracy_abstain_as_wrong": accuracy(
            voter.predict(L["test"], tie_break_policy="abstain"), Y["test"]),
        "covered_test_accuracy": covered_accuracy(
            voter.predict(L["test"], tie_break_policy="random"), L["test"], Y["test"])}}


def our_model(name: str, model, L: dict, Y: dict, repeats: int = 5) -> dict:
    model.fit(L["dev"])  # warm-up (first-use costs of torch's autograd and L-BFGS)
    fitted, times = _timed(lambda: model.fit(L["train"]), repeats)
    out = {"model": name, "fit_s_median": statistics.median(times), "fit_s": times,
           **{f"{split}_accuracy": fitted.score(L[split], Y[split])
              for split in ("valid", "test")},
           "covered_test_accuracy": covered_accuracy(fitted.predict(L["test"]), L["test"], Y["test"]),
           "class_balance": np.round(fitted.class_balance_, 4).tolist(),
           "fit_residual": getattr(fitted, "fit_residual_", None),
           "worst_pair": [L_NAMES[j] for j in getattr(fitted, "worst_pair_", None) or ()]}
    logger.info("%-44s valid %.4f  test %.4f  covered test %.4f  fit %.4f s", name,
                out["valid_accuracy"], out["test_accuracy"], out["covered_test_accuracy"],
                out["fit_s_median"])
    return out


def paired(predictions: dict[str, np.ndarray], gold: np.ndarray) -> dict:
    """For each pair of models: on how many test comments they differ, and who is right there
    (1 comment = 0.4 points of the 250)."""
    out = {}
    names = list(predictions)
    for a_i, a in enumerate(names):
        for b in names[a_i + 1:]:
            differ = predictions[a] != predictions[b]
            out[f"{a} vs {b}"] = {"differ": int(differ.sum()),
                                  f"{a}_right": int((predictions[a] == gold)[differ].sum()),
                                  f"{b}_right": int((predictions[b] == gold)[differ].sum())}
    return out


VARIANTS = {  # our LabelModel: the default first, then one change at a time
    "LabelModel() [default]": {},
    "LabelModel(class_balance=uniform)": {"class_balance": np.array([0.5, 0.5])},
    "LabelModel(abstain_evidence=True)": {"abstain_evidence": True},
    "LabelModel(better_than_random=False)": {"better_than_random": False},
    "LabelModel(uniform, abstain_evidence=True)": {"class_balance": np.array([0.5, 0.5]),
                                                   "abstain_evidence": True},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lfs", default=str(ROOT / "examples/weak/spam_lfs.py"))
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/weak_spam.json"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("muppets").setLevel(logging.ERROR)  # the residual warning is in the JSON

    root = data_dir()
    splits = load_spam_tutorial_split(root)
    split_check, raw_texts = check_split_against_tutorial(root, splits)
    lfs = load_lfs(args.lfs)
    names = [lf.name for lf in lfs]
    L_NAMES[:] = names
    L = {k: apply_lfs(lfs, v, 2, progress=False) for k, v in splits.items()}
    Y = {k: np.array([int(e.label) for e in v]) for k, v in splits.items()}
    import snorkel
    import torch

    result = {
        "command": "python benchmarks/weak_spam.py " + " ".join(sys.argv[1:]),
        "versions": {"snorkel": snorkel.__version__, "torch": torch.__version__,
                     "numpy": np.__version__},
        "notes": [
            "Same label matrices for every model; LFs = the tutorial's 7 deterministic ones "
            "(its spaCy/TextBlob LFs left out), so its published 84.0/86.0 are for another matrix.",
            "Our LabelModel's hyperparameters are its defaults, fixed a priori; the variants are "
            "reported on valid and test for transparency; none was selected on test (on valid the "
            "default ties with 3 of the 4 variants at 101/120).",
            "Rows where every LF abstains decide a large share of the errors: our MajorityVote "
            "abstains on them (counted wrong) unless given a class balance (the dev shares row), "
            "our label models give them the learned prior's class, Snorkel's MajorityLabelVoter a "
            "hash of the row index (tie_break_policy='random').",
            "Fit times: median of 5 fits after a warm-up fit; 2 busy cores, OMP_NUM_THREADS=1.",
            "covered_test_accuracy = accuracy on the test rows at least one LF labels (the "
            "tutorial's end model trains on covered rows only); there majority vote beats both "
            "label models on this LF set: the keyword LFs are one-sided and not conditionally "
            "independent, which both label models assume.",
        ],
        "machine": platform.processor() or platform.machine(), "python": platform.python_version(),
        "split": {k: len(v) for k, v in splits.items()}, "split_check": split_check,
        "lfs": names,
        "same_votes_on_tutorial_raw_text": check_lfs_on_raw_text(lfs, raw_texts, L) if raw_texts
        else None,
        "coverage_any_lf": {k: float((L[k] != -1).any(axis=1).mean()) for k in L},
        "rows_without_votes": {k: int((L[k] == -1).all(axis=1).sum()) for k in L},
        "lf_summary_dev": summary_parity(L["dev"], Y["dev"], names),
    }
    dev_shares = np.bincount(Y["dev"], minlength=2) / len(Y["dev"])  # the 100 labelled dev comments
    ours = [our_model("MajorityVote", MajorityVote(2), L, Y),
            our_model("DawidSkene", DawidSkene(2), L, Y),
            our_model("MajorityVote(class_balance=dev shares)", MajorityVote(2, class_balance=dev_shares), L, Y)]
    ours += [our_model(name, LabelModel(2, **kw), L, Y) for name, kw in VARIANTS.items()]
    result["muppets"] = ours
    result["snorkel"] = snorkel_runs(L, Y)
    runs = result["snorkel"]["label_model"]
    result["headline"] = {
        "muppets_label_model_test": ours[3]["test_accuracy"],
        "muppets_label_model_fit_s": ours[3]["fit_s_median"],
        "snorkel_label_model_test_mean": statistics.mean(r["test_accuracy"] for r in runs),
        "snorkel_label_model_test_per_seed": [r["test_accuracy"] for r in runs],
        "snorkel_label_model_fit_s_median": statistics.median(r["fit_s"] for r in runs),
        "muppets_majority_test": ours[0]["test_accuracy"],
        "snorkel_majority_test_random_tiebreak":
            result["snorkel"]["majority"]["test_accuracy_random_tiebreak"],
        "muppets_dawid_skene_test": ours[1]["test_accuracy"],
        "covered_test_rows": int((L["test"] != -1).any(axis=1).sum()),
        "covered_test_accuracy": {
            "muppets_label_model": ours[3]["covered_test_accuracy"],
            "snorkel_label_model_mean": statistics.mean(r["covered_test_accuracy"] for r in runs),
            "muppets_majority": ours[0]["covered_test_accuracy"],
            "snorkel_majority": result["snorkel"]["majority"]["covered_test_accuracy"],
            "muppets_dawid_skene": ours[1]["covered_test_accuracy"]},
    }
    result["paired_on_test"] = paired(
        {"muppets_label_model": LabelModel(2).fit(L["train"]).predict(L["test"]),
         "muppets_majority": MajorityVote(2).fit(L["train"]).predict(L["test"]),
         "snorkel_label_model_seed123": np.array(runs[0].pop("test_predictions"))}, Y["test"])
    for run in runs[1:]:
        run.pop("test_predictions")
    logger.info("headline: %s", json.dumps(result["headline"], indent=1))
    logger.info("paired on test: %s", json.dumps(result["paired_on_test"]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
