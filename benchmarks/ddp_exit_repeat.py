"""How often a two-process torchrun run fails at exit: the multi-task DDP test, run again and again.

A torchrun worker whose work was done was seen to abort at exit ("terminate called without an
active exception", SIGABRT), and torchrun then reports the whole run failed. This runs
``tests/test_multitask.py::test_two_process_ddp_equals_one_process`` ``--runs`` times in each of
``--parallel`` loops side by side (the load a CI run puts on 2 cores), with Python's fault
handler on, and counts the failures; the logs of failed runs are kept under ``--out``'s folder.

    python benchmarks/ddp_exit_repeat.py --runs 30 --parallel 2 --out benchmarks/results/ddp_exit_repeat.json
    # another checkout (an older commit: git worktree add /tmp/old COMMIT), with this venv:
    python benchmarks/ddp_exit_repeat.py --root /tmp/old --out benchmarks/results/ddp_exit_repeat_old.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/test_multitask.py::test_two_process_ddp_equals_one_process"


def loop(name: str, root: Path, runs: int, logs: Path, results: list[dict]) -> None:
    env = dict(os.environ, PYTHONFAULTHANDLER="1", OMP_NUM_THREADS="1")
    for i in range(runs):
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "-q",
                               "-x", TEST], cwd=root, env=env, capture_output=True, text=True)
        failed = proc.returncode != 0
        if failed:
            (logs / f"{name}_{i}.log").write_text(proc.stdout + proc.stderr)
        results.append({"loop": name, "run": i, "failed": failed, "seconds": time.perf_counter() - started,
                        "sigabrt": "SIGABRT" in proc.stdout})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30, help="runs per loop")
    ap.add_argument("--parallel", type=int, default=2, help="loops side by side")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose tests and src/ run")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "ddp_exit_repeat.json")
    args = ap.parse_args()
    logs = args.out.with_suffix("")
    logs.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    threads = [threading.Thread(target=loop, args=(chr(65 + k), args.root, args.runs, logs, results))
               for k in range(args.parallel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = sum(r["failed"] for r in results)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.root, capture_output=True,
                            text=True).stdout.strip()
    summary = {"test": TEST, "commit": commit, "runs": len(results), "failed": failed, "sigabrt": sum(r["sigabrt"] for r in results),
               "parallel": args.parallel, "date": time.strftime("%Y-%m-%d %H:%M"), "results": results}
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{failed} of {len(results)} runs failed ({summary['sigabrt']} with SIGABRT); logs of failures in {logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
