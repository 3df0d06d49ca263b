"""Does the 2-CPU-hour bert-mini help where labels are few? SST-2 dev accuracy against the number
of training sentences, pretrained vs random initialisation of the same architecture (issue 16).

On all of SST-2's 6,920 training sentences, the untied bert-mini (``configs/bert-mini-fast.yaml``)
does not beat random initialisation (BENCHMARKS.md, issue 16): a random 4-layer encoder learns
the task from that much data. This script fine-tunes both arms on the first N training sentences
(the file is shuffled: both labels about half of every prefix), N in ``--sizes``, with the
setting both arms chose on their train slices on the full data (lr 3e-4 for 6 epochs, batch 32,
one thread, fp32; every other setting the default). Each run holds out its own stratified 10%
of the N sentences to choose the best epoch; dev (872 sentences) is only reported. The full-data
rows are the existing runs of the same setting (``--full``). Prints mean ± std over seeds and
the paired difference pretrained − random per N.

    OMP_NUM_THREADS=1 python benchmarks/label_budget.py --sizes 250 500 1000 2000 --seeds 1 2 3 --parallel 2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import ROOT, run_logged, schedule  # noqa: E402
from paired import paired, summary  # noqa: E402
from tables import write_table  # noqa: E402

SETTING = ["epochs=6", "batch_size=32", "threads=1", "precision=fp32", "progress=false"]
ARMS = {"pretrained": [], "random": ["init=random"]}


def run_dir(arm: str, size: int, tag: str = "") -> Path:
    return ROOT / "runs" / f"ft-sst2-labels{tag}-{arm}-n{size}"


def finetune(model: str, arm: str, size: int, seed: int, tag: str = "", lr: str = "3e-4") -> None:
    out = run_dir(arm, size, tag)
    if (out / f"seed-{seed}" / "metrics.json").is_file():
        used = json.loads((out / f"seed-{seed}" / "config.json").read_text())["lr"]
        if float(used) != float(lr):
            raise SystemExit(f"{out}/seed-{seed} was fine-tuned at lr {used}, not {lr}: give another --tag")
        return
    run_logged([sys.executable, "-m", "muppets.cli", "finetune", "sst2", "--seeds", str(seed), f"model={model}",
                *ARMS[arm], *SETTING, f"lr={lr}", f"max_train_examples={size}", f"run_dir={out}"],
               out.with_name(out.name + f"-{seed}.log"))


def dev_scores(directory: Path, seeds: list[int]) -> dict[int, float]:
    found = {}
    for seed in seeds:
        path = directory / f"seed-{seed}" / "metrics.json"
        if path.is_file():
            found[seed] = 100 * json.loads(path.read_text())["dev"]["accuracy"]
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="runs/bert-mini-untied")
    ap.add_argument("--sizes", type=int, nargs="+", default=[250, 500, 1000, 2000])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--full", nargs=2, metavar=("PRETRAINED", "RANDOM"),
                    default=["runs/ft-sst2-bert-mini-untied-lr3e-4-ep6", "runs/ft-sst2-random-epyc-lr3e-4-ep6"],
                    help="run directories of the same setting on all of train")
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS),
                    help="run only these (the other's runs of the same --tag, or untagged, are read)")
    ap.add_argument("--tag", default="", help="names the run directories of the arms run here (e.g. -new-emb for a "
                    "redraw_parts.py copy); an arm not in --arms is read from the untagged runs")
    ap.add_argument("--lr", default="3e-4", help="the peak learning rate of every run (another value needs a --tag)")
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--table-only", action="store_true")
    ap.add_argument("--out", type=Path, help="default: benchmarks/results/label_budget<TAG>.json")
    args = ap.parse_args()
    if float(args.lr) != 3e-4 and not args.tag:
        ap.error("--lr other than 3e-4 needs a --tag, so its runs do not mix with the recorded ones")
    if float(args.lr) != 3e-4 and set(args.arms) != set(ARMS):
        ap.error(f"--lr {args.lr} with only --arms {' '.join(args.arms)} would pair with the untagged runs at lr 3e-4")
    args.out = args.out or ROOT / f"benchmarks/results/label_budget{args.tag}.json"
    if not args.table_only:
        jobs = [(f"{arm}-n{size}-s{seed}", lambda a=arm, n=size, s=seed: finetune(args.model, a, n, s, args.tag, args.lr), [])
                for size in args.sizes for seed in args.seeds for arm in args.arms]
        schedule(jobs, args.parallel)
    rows = {}
    dirs = {size: {arm: run_dir(arm, size, args.tag if arm in args.arms else "") for arm in ARMS}
            for size in args.sizes}
    if not args.tag:  # the full-data runs are of the untagged model
        dirs["all"] = dict(zip(ARMS, (ROOT / d for d in args.full)))
    for size, by_arm in dirs.items():
        scores = {arm: dev_scores(d, args.seeds) for arm, d in by_arm.items()}
        rows[str(size)] = {**{arm: summary(s) for arm, s in scores.items() if s},
                           "pretrained_minus_random": paired(scores["pretrained"], scores["random"])}
    lines = ["| training sentences | pretrained | random init | pretrained − random, paired | 95% t interval | wins-losses |",
             "|---|---|---|---|---|---|"]
    for size, row in rows.items():
        d = row["pretrained_minus_random"]
        if not d:
            continue
        lines.append(f"| {size if size != 'all' else '6,920 (all)'} | {row['pretrained']['mean']:.2f} ± "
                     f"{row['pretrained']['std']:.2f} | {row['random']['mean']:.2f} ± {row['random']['std']:.2f} | "
                     f"**{d['mean']:+.2f}** ± {d['std']:.2f} | {d['t95'][0]:+.2f} … {d['t95'][1]:+.2f} | "
                     f"{d['wins']}-{d['losses']} |")
    table = {"model": args.model, "setting": [*SETTING, f"lr={args.lr}"], "seeds": args.seeds,
             "full": None if args.tag else args.full, "rows": rows}
    print(write_table(args.out, table, "\n".join(lines) + "\n"))


if __name__ == "__main__":
    main()
