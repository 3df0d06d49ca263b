"""What the main job's pretraining buys, over several seeds: the README's main job
(``muppets pretrain configs/quickstart.yaml``) fine-tunes its model and a random initialisation
of it once, with one seed; this script repeats that transfer with several fine-tuning seeds (and
optionally several pretraining seeds) and reports the paired difference.

For every pretraining seed P it runs the main job's pretraining (``train.seed=P``, in
``<root>/pretrain-seed-P``; reused when finished), then for every fine-tuning seed S the main job's
own transfer (:func:`muppets.transfer.pretraining_gain.run`, ``transfer.finetune.seed=S``, in
``<root>/pretrain-seed-P/transfer-seed-S``). Each pair (P, S) gives pretrained, random
initialisation and majority class on the reported split (CoNLL-2003 test: it chose nothing);
the table gives their means ± sample std and the paired difference pretrained − random (95% t
interval, wins-losses). Results: ``benchmarks/results/main_job_gain.json`` (and ``.md``).

    OMP_NUM_THREADS=1 python benchmarks/main_job_gain.py --seeds 1 2 3 4 5 --parallel 2
    python benchmarks/main_job_gain.py --pretrain-seeds 1 2 --seeds 1 2 3 -- transfer.finetune.lr=5e-4
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from paired import paired, summary  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/quickstart.yaml", help="the main job's config")
    ap.add_argument("--root", default="runs/main-job-gain", help="where the runs go")
    ap.add_argument("--pretrain-seeds", type=int, nargs="+", default=None,
                    help="train.seed of each pretraining (default: the config's own, as the main job runs)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="fine-tuning seeds")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of every run")
    ap.add_argument("--parallel", type=int, default=1, help="fine-tuning seeds run at once (processes)")
    ap.add_argument("--out", default="benchmarks/results/main_job_gain.json")
    ap.add_argument("overrides", nargs="*", help="key=value overrides of the config (after --)")
    return ap.parse_args(argv)


def pretrain(config: str, overrides: list[str], run_dir: Path, seed: int, threads: int) -> dict:
    """The main job's pretraining at ``train.seed=seed`` (its transfer left to :func:`transfer`);
    returns its summary.json (a finished run is reused: the recipe resumes it)."""
    from muppets.recipes import bert_pretrain
    from muppets.train.logger import read_log

    cfg = bert_pretrain.load_config(config, [*overrides, f"run_dir={run_dir}", f"train.seed={seed}",
                                             f"train.threads={threads}", "train.progress=false", "transfer.task="])
    out = bert_pretrain.run(cfg)
    elapsed = [r["elapsed_s"] for r in read_log(run_dir, strict=False) if "elapsed_s" in r]
    out["train_s"] = elapsed[-1] if elapsed else None  # the training's own time, also when the run is reused
    return out


def transfer(config: str, overrides: list[str], run_dir: Path, seed: int, threads: int, data) -> dict:
    """The main job's transfer of ``run_dir/final`` with fine-tuning seed ``seed``."""
    from muppets.recipes import bert_pretrain
    from muppets.transfer import pretraining_gain

    cfg = bert_pretrain.load_config(config, [*overrides, f"transfer.finetune.seed={seed}",
                                             f"transfer.finetune.threads={threads}", "transfer.finetune.progress=false"])
    return pretraining_gain.run(cfg.transfer, run_dir, cfg.device, data, out=run_dir / f"transfer-seed-{seed}")


def transfer_job(job: tuple) -> dict:
    """:func:`transfer` of one seed (a process of the pool runs it)."""
    return transfer(*job)


def table(rows: list[dict]) -> dict:
    """Means ± std of every arm and the paired difference pretrained − random, over all (P, S) pairs."""
    pairs = {i: r for i, r in enumerate(rows)}
    arms = {arm: {i: r[arm] for i, r in pairs.items()} for arm in ("pretrained", "random", "majority")}
    return {**{arm: summary(values) for arm, values in arms.items()},
            "pretrained_minus_random": paired(arms["pretrained"], arms["random"])}


def markdown(result: dict) -> str:
    t, first = result["table"], result["rows"][0]
    d = t["pretrained_minus_random"]
    lines = [f"main job gain: {first['task']} {first['split']} {first['metric']}, {len(result['rows'])} pairs "
             f"(pretraining seeds {result['pretrain_seeds']} x fine-tuning seeds {result['seeds']})", "",
             "| arm | mean ± std | values |", "|---|---|---|"]
    for arm in ("pretrained", "random", "majority"):
        lines.append(f"| {arm} | {t[arm]['mean']:.4f} ± {t[arm]['std']:.4f} | "
                     + " / ".join(f"{v:.4f}" for v in t[arm]["values"]) + " |")
    lines.append(f"| pretrained − random | **{d['mean']:+.4f} ± {d['std']:.4f}** (95% t [{d['t95'][0]:+.4f}, "
                 f"{d['t95'][1]:+.4f}], {d['wins']}-{d['losses']}) | |")
    for p in result["pretraining"]:
        ev, base = p["eval"], p["unigram_baseline"]
        lines.append(f"\npretraining seed {p['seed']}: {p['step']} steps trained in {p['train_s']:.0f} s here; held-out MLM "
                     f"accuracy {ev['mlm_accuracy']:.4f} (unigram {base['mlm_accuracy']:.4f})")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from muppets.transfer import finetune
    from muppets.recipes import bert_pretrain

    cfg = bert_pretrain.load_config(args.config, args.overrides)
    args.pretrain_seeds = args.pretrain_seeds or [cfg.train.seed]
    data = finetune.load_task_data(finetune.TaskSection(name=cfg.transfer.task))
    rows, pretraining = [], []
    for p in args.pretrain_seeds:
        run_dir = Path(args.root) / f"pretrain-seed-{p}"
        summary_ = pretrain(args.config, args.overrides, run_dir, p, args.threads)
        pretraining.append({"seed": p, **{k: summary_.get(k) for k in ("step", "eval", "unigram_baseline", "train_s")}})
        jobs = [(args.config, args.overrides, run_dir, s, args.threads, data) for s in args.seeds]
        with ProcessPoolExecutor(args.parallel, mp_context=multiprocessing.get_context("spawn")) as pool:
            for s, r in zip(args.seeds, pool.map(transfer_job, jobs)):
                row = {"pretrain_seed": p, "seed": s,
                       **{k: r[k] for k in ("task", "split", "metric", "pretrained", "random", "majority", "gain",
                                            "train_examples", "steps", "scored_on")}}
                print(json.dumps(row), flush=True)
                rows.append(row)
    result = {"command": " ".join(["python", "benchmarks/main_job_gain.py", *(argv if argv is not None else sys.argv[1:])]),
              "config": args.config, "overrides": args.overrides, "pretrain_seeds": args.pretrain_seeds,
              "seeds": args.seeds, "threads": args.threads,
              "date": datetime.date.today().isoformat(), "machine": {"platform": platform.platform(),
                                                                     "processor": platform.processor(),
                                                                     "cpus": os.cpu_count()},
              "pretraining": pretraining, "rows": rows, "table": table(rows)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    text = markdown(result)
    out.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
