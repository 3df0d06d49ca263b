"""Claim: trimming the heap between steps keeps fine-tuning's resident memory from drifting upward,
at a small cost in training time.

Length-sorted fine-tuning batches change shape every step; glibc keeps the freed blocks, so the
resident size of a fine-tuning run climbs far above what the step needs (``muppets.heap``).
``train.trim_heap_seconds`` (``trim_heap_seconds`` of ``muppets finetune``) calls ``malloc_trim`` (or
tcmalloc's release) between steps at most that often. This script runs the same fine-tuning (same seed, same batches)
once per setting, as a fresh process each, and reports for each:

* ``peak_rss_gb``: the largest VmRSS sampled every 50 ms over the whole run;
* ``rss_end_gb``: VmRSS when log.jsonl first shows step ``--steps`` (one sample: the drift, noisy);
* ``train_s``: training time from ``log.jsonl`` (``elapsed_s`` of the last step; evaluation excluded)
  and its ratio to the untrimmed run (``0``), which runs first and last (the mean of the two is the
  reference), so that a drift in the machine's load shows;
* ``trims`` and ``trim_s`` from the run's log.

Every run sets ``$MUPPETS_MALLOC``: ``system`` (glibc's malloc) for the trim settings; ``--allocators
NAME=LIBRARY …`` adds runs under another malloc (the library's path, which ``muppets`` preloads),
e.g. jemalloc or tcmalloc, which keep freed memory in size classes and return it on their own,
at each interval of ``--allocator-trims`` (0, untrimmed, by default; under tcmalloc a trim is its
``ReleaseFreeMemory``).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/finetune_memory.py --out benchmarks/results/finetune_memory.json
    ... --task chnsenticorp --model runs/zh/bert-mini-piece --max-len 256 --steps 300 --out ...

The default fine-tunes all-MiniLM-L6-v2 on SQuAD v1.1 (384-token windows, batch 32, bf16), the
task whose windows vary most in length.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prepare_memory import _vm_rss as rss  # noqa: E402  (VmRSS of a pid, shared)

REPO = Path(__file__).resolve().parent.parent
GB = 1024 ** 3


def last_step(log: Path) -> int:
    try:
        lines = log.read_bytes().splitlines()
        return json.loads(lines[-1])["step"] if lines else 0
    except (OSError, ValueError, KeyError):
        return 0


def run(args: argparse.Namespace, seconds: float, run_dir: Path, allocator: str = "glibc") -> dict:
    """One fine-tuning run with ``trim_heap_seconds=seconds`` (under another malloc when
    ``allocator`` is ``NAME=LIBRARY``: ``MUPPETS_MALLOC=LIBRARY``); its memory and time."""
    cmd = [sys.executable, "-m", "muppets.cli", "finetune", args.task, "--model", args.model, "--fresh",
           f"max_seq_len={args.max_len}", f"max_train_examples={args.steps * 32}", "batch_size=32", "epochs=1",
           f"max_eval_examples={args.eval_examples}", "threads=1", f"precision={args.precision}", "progress=false",
           f"seed={args.seed}", f"trim_heap_seconds={seconds}", f"run_dir={run_dir}", "log_every=10"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MUPPETS_MALLOC": "system"}
    env.pop("LD_PRELOAD", None)
    if "=" in allocator:
        allocator, env["MUPPETS_MALLOC"] = allocator.split("=", 1)
    with open(run_dir.with_suffix(".log"), "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        peak, end, halt = [0], [0], threading.Event()

        def sample() -> None:
            while not halt.is_set():
                now = rss(proc.pid)
                peak[0] = max(peak[0], now)
                if not end[0] and last_step(run_dir / "log.jsonl") >= args.steps:
                    end[0] = now
                halt.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = proc.wait()
        halt.set()
        sampler.join()
    text = run_dir.with_suffix(".log").read_text()
    if code != 0:
        raise SystemExit(f"trim_heap_seconds={seconds}: exit {code}\n{text[-2000:]}")
    rows = [row for line in (run_dir / "log.jsonl").read_text().splitlines()
            if "elapsed_s" in (row := json.loads(line))]  # training steps (evaluations have no time)
    trims = re.search(r"heap trimmed (\d+) times \(([\d.]+) s\)", text)
    return {"allocator": allocator, "trim_heap_seconds": seconds, "steps": rows[-1]["step"], "peak_rss_gb": round(peak[0] / GB, 3),
            "rss_end_gb": round(end[0] / GB, 3), "train_s": round(rows[-1]["elapsed_s"], 1),
            "trims": int(trims.group(1)) if trims else 0, "trim_s": float(trims.group(2)) if trims else 0.0,
            "final_loss": rows[-1]["loss"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="squad")
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--max-len", type=int, default=384)
    ap.add_argument("--steps", type=int, default=120,
                    help="training examples / 32 (span tasks cut examples into more windows: more steps)")
    ap.add_argument("--eval-examples", type=int, default=32)
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--settings", type=float, nargs="*", default=[30.0, 10.0],
                    help="trim intervals (s) measured between the two untrimmed runs")
    ap.add_argument("--allocators", nargs="*", default=[], metavar="NAME=LIBRARY",
                    help="also run under these mallocs (MUPPETS_MALLOC=LIBRARY), e.g. "
                         "jemalloc=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
    ap.add_argument("--allocator-trims", type=float, nargs="*", default=[0.0],
                    help="trim intervals (s) of the runs under --allocators (0: untrimmed)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    order = [(0.0, "glibc"), *((t, "glibc") for t in args.settings),
             *((t, a) for a in args.allocators for t in args.allocator_trims), (0.0, "glibc")]
    results = []
    with tempfile.TemporaryDirectory(prefix="finetune-memory-") as tmp:
        for i, (seconds, allocator) in enumerate(order):
            results.append(run(args, seconds, Path(tmp) / f"run-{i}", allocator))
            print(json.dumps(results[-1]), flush=True)
    off = [r for r in results if r["trim_heap_seconds"] == 0 and r["allocator"] == "glibc"]
    reference = sum(r["train_s"] for r in off) / len(off)
    for r in results:
        r["train_ratio"] = round(r["train_s"] / reference, 3)
    if len({r["final_loss"] for r in results}) != 1:
        print("warning: the runs' final losses differ", {r["final_loss"] for r in results}, flush=True)
    report = {"task": args.task, "model": args.model, "max_len": args.max_len, "steps": args.steps,
              "precision": args.precision, "seed": args.seed, "date": time.strftime("%Y-%m-%d"),
              "machine": f"{os.cpu_count()} cores", "runs": results}
    for r in results:
        print(f"{r['allocator']:>8}, trim {r['trim_heap_seconds']:>4g} s: peak {r['peak_rss_gb']:.2f} GB, at the last step "
              f"{r['rss_end_gb']:.2f} GB, training {r['train_s']:.0f} s (x{r['train_ratio']:.3f}), "
              f"{r['trims']} trims ({r['trim_s']:.1f} s)")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
