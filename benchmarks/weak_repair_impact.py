"""What issue 47's label-model repairs change on real label matrices, label by label (issue 47).

The end-model tables of issue 17 are functions of the labels the label models give the
training rows: where those labels are identical before and after a repair, the fine-tuning
runs (seeded, deterministic) are identical too, and only the rows whose labels moved need
re-running. This script fits every label model of those tables on two real matrices and writes
each model's train labels, class balance and held-out accuracy; run it once with the code
before the repairs and once after, then ``--compare`` the two outputs:

* ``spam``: the Snorkel spam tutorial's 7 deterministic LFs on its train split (1,586), scored
  on valid (120) and test (250);
* ``sst2``: the SST-2 LFs of ``benchmarks/weak_sst2.py`` without the zero-shot gpt-mini LF
  (lexicon, patterns, MiniLM prototypes), on train, scored on dev (872).

    OMP_NUM_THREADS=1 python benchmarks/weak_repair_impact.py --out after.json
    OMP_NUM_THREADS=1 PYTHONPATH=<checkout before>/src python benchmarks/weak_repair_impact.py --out before.json
    python benchmarks/weak_repair_impact.py --compare before.json after.json --out benchmarks/results/weak_repair_impact.json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
logger = logging.getLogger("weak_repair_impact")


def matrices(cache_dir: str) -> dict[str, dict]:
    """``{name: {"L": {split: L}, "Y": {split: gold}, "dev_shares": (K,)}}`` of both matrices."""
    from muppets.paths import data_dir
    from muppets.tasks import load_task
    from muppets.tasks.spam import load_spam_tutorial_split
    from muppets.weak import apply_lfs, load_lfs
    from weak_sst2 import build_lfs

    spam = load_spam_tutorial_split(data_dir())
    spam_lfs = load_lfs(ROOT / "examples/weak/spam_lfs.py")
    sst2 = load_task("sst2")
    args = argparse.Namespace(no_prototypes=False, no_zero_shot=True, encoder="minilm", gpt_model=None)
    sst2_lfs = build_lfs(args, sst2["train"])
    out = {}
    for name, lfs, splits, held_out in (("spam", spam_lfs, spam, ("valid", "test")),
                                        ("sst2", sst2_lfs, {"train": sst2["train"], "dev": sst2["dev"]}, ("dev",))):
        keep = ("train", *held_out)
        out[name] = {"L": {s: apply_lfs(lfs, splits[s], 2, cache_dir=cache_dir, progress=False) for s in keep},
                     "Y": {s: np.array([int(e.label) for e in splits[s]]) for s in keep},
                     "held_out": held_out}
    out["spam"]["dev_shares"] = np.bincount([int(e.label) for e in spam["dev"]], minlength=2) / len(spam["dev"])
    return out


def models(dev_shares: np.ndarray | None) -> dict[str, object]:
    from muppets.weak import DawidSkene, LabelModel, MajorityVote

    out = {"majority": MajorityVote(2), "dawid-skene": DawidSkene(2), "learned": LabelModel(2),
           "uniform": LabelModel(2, class_balance=np.array([0.5, 0.5]))}
    if dev_shares is not None:
        out["labelled-balance"] = LabelModel(2, class_balance=dev_shares)
    return out


def measure(cache_dir: str) -> dict:
    result = {}
    for name, m in matrices(cache_dir).items():
        L, Y = m["L"], m["Y"]
        rows = {}
        for label, model in models(m.get("dev_shares")).items():
            model.fit(L["train"])
            rows[label] = {"train_labels": model.predict(L["train"]).tolist(),
                           "class_balance": np.round(model.class_balance_, 4).tolist(),
                           **{f"{s}_accuracy": model.score(L[s], Y[s]) for s in m["held_out"]}}
        result[name] = {"rows": len(Y["train"]), "covered": int((L["train"] != -1).any(axis=1).sum()),
                        "models": rows}
    return result


def compare(before: dict, after: dict) -> dict:
    """Per matrix and model: how many train labels moved (all rows, and rows some LF labels),
    and the held-out accuracies and balances side by side."""
    out = {}
    for name in (k for k, v in after.items() if isinstance(v, dict) and "models" in v):
        out[name] = {"rows": after[name]["rows"], "covered": after[name]["covered"]}
        for label, new in after[name]["models"].items():
            old = before[name]["models"].get(label)
            if old is None:
                continue
            a, b = np.array(old["train_labels"]), np.array(new["train_labels"])
            out[name][label] = {
                "train_labels_changed": int((a != b).sum()),
                "of_which_to_abstain": int(((a != b) & (b == -1)).sum()),
                "class_balance": {"before": old["class_balance"], "after": new["class_balance"]},
                **{k: {"before": old[k], "after": new[k]} for k in new if k.endswith("_accuracy")}}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--cache-dir", default=str(ROOT / "runs/weak-cache"))
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("muppets").setLevel(logging.ERROR)
    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.compare)
        result = {"command": "python benchmarks/weak_repair_impact.py " + " ".join(sys.argv[1:]),
                  "comparison": compare(before, after)}
    else:
        result = {"command": "python benchmarks/weak_repair_impact.py " + " ".join(sys.argv[1:]),
                  **measure(args.cache_dir)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    logger.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
