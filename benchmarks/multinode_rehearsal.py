"""Two machines rehearsed on one, on real text: figures for docs/concepts/multi-node.md.

Runs ``muppets pretrain`` (BERT-tiny, masked LM, on a slice of the shared English corpus) three
ways and compares them:

1. one process;
2. ``torchrun --nnodes 2 --nproc-per-node 1`` in two network namespaces joined by a veth pair
   (``scripts/netns_rehearsal.py``; c10d rendezvous on node 0's address, gloo across the veth);
3. the same two-node job with node 1's worker killed (SIGKILL) right after the first checkpoint
   and ``--max-restarts 1``: torchrun restarts both workers, which resume from that checkpoint.

It prints and writes (``--out``) the largest weight difference of 2 and 3 from 1 after the
last step, the largest logged-loss difference, and the wall time of each run (2 cores: one
process of one thread against two processes of one thread each; the restart's cost is the
difference between 3 and 2). Needs root (network namespaces).

    python benchmarks/multinode_rehearsal.py --steps 60 --out benchmarks/results/multinode_rehearsal.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("netns_rehearsal", ROOT / "scripts" / "netns_rehearsal.py")
netns = importlib.util.module_from_spec(_spec)
sys.modules["netns_rehearsal"] = netns
_spec.loader.exec_module(netns)  # type: ignore[union-attr]

_SLOW_AFTER_FIRST_CHECKPOINT = """
import sys, time
from muppets.train.trainer import Trainer
report = Trainer._report
every = int(sys.argv.pop(1))
def slow_report(self, stats):
    report(self, stats)
    if self.step == every:
        time.sleep(3.0)  # room to kill a worker after the first checkpoint
Trainer._report = slow_report
from muppets.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               TORCH_CPP_LOG_LEVEL="ERROR")
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _muppets(*args: str, cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "muppets.cli", *args], cwd=cwd, env=_env(), check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def _diffs(a: Path, b: Path) -> tuple[float, float]:
    wa, wb = (load_file(str(p / "final" / "model.safetensors")) for p in (a, b))
    weights = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    la, lb = ({r["step"]: r["loss"] for r in map(json.loads, (p / "log.jsonl").read_text().splitlines())
               if "loss" in r} for p in (a, b))
    assert la.keys() == lb.keys(), (sorted(la), sorted(lb))
    return weights, max(abs(la[s] - lb[s]) for s in la)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("runs/multinode_rehearsal"))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    reason = netns.unavailable()
    if reason:
        print(f"cannot rehearse: {reason}")
        return 1
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    every = args.steps // 3
    config = work / "bert.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"preset": "bert-tiny", "pretrain_dropout": 0.0},
        "tokenizer": {"path": str(work / "tok"), "vocab_size": 8192},
        "corpus": {"inputs": ["data:english-corpus/wiki"], "prepared": str(work / "corpus")},
        "data": {"max_seq_len": 128, "nsp": False, "eval_examples": 64},
        "train": {"steps": args.steps, "batch_size": 32, "lr": 1e-3, "warmup_steps": 6,
                  "checkpoint_every": every, "log_every": 1, "progress": False, "threads": 1}}))
    if not (work / "corpus").is_dir():
        _muppets("tokenizer", "train", "--input", "data:english-corpus/wiki", "--out", str(work / "tok"),
                 "--vocab-size", "8192", cwd=work)
        _muppets("data", "prepare", "--input", "data:english-corpus/wiki", "--tokenizer", str(work / "tok"),
                 "--out", str(work / "corpus"), cwd=work)
    results: dict[str, object] = {"steps": args.steps, "checkpoint_every": every, "model": "bert-tiny",
                                  "batch_size": 32, "max_seq_len": 128}
    one, two, elastic = work / "one", work / "two", work / "elastic"
    for run in (one, two, elastic):  # new runs; no --fresh: a restarted worker must resume
        shutil.rmtree(run, ignore_errors=True)
    results["one_process_s"] = _muppets("pretrain", str(config), f"run_dir={one}", cwd=work)
    script = work / "slow_worker.py"
    script.write_text(_SLOW_AFTER_FIRST_CHECKPOINT)
    with netns.two_nodes() as cluster:
        logs = work / "logs-two"
        logs.mkdir(exist_ok=True)
        started = time.perf_counter()
        procs = cluster.launch(["-m", "muppets.cli", "pretrain", str(config), f"run_dir={two}"],
                               run_id="two", env=_env(), cwd=work, logs=logs)
        codes = cluster.wait(procs, 1800)
        results["two_nodes_s"] = time.perf_counter() - started
        assert codes == [0, 0], codes
        logs = work / "logs-elastic"
        logs.mkdir(exist_ok=True)
        started = time.perf_counter()
        procs = cluster.launch([str(script), str(every), "pretrain", str(config), f"run_dir={elastic}"],
                               run_id="elastic", env=_env(), cwd=work, max_restarts=1, logs=logs)
        first = elastic / "checkpoints" / f"step-{every:08d}"
        while not first.is_dir():
            time.sleep(0.01)
        worker = subprocess.run(["pgrep", "-P", str(procs[1].pid)], capture_output=True, text=True).stdout.split()
        os.kill(int(worker[0]), signal.SIGKILL)
        killed_at = time.perf_counter()
        codes = cluster.wait(procs, 1800)
        results["elastic_s"] = time.perf_counter() - started
        assert codes == [0, 0], codes
        text = (logs / "node0.log").read_text()
        resumed = [line for line in text.splitlines() if "resumed from" in line]
        results["resumed"] = resumed[0].split("muppets.train.trainer: ")[-1] if resumed else None
        results["kill_after_s"] = killed_at - started
    for name, run in (("two_nodes", two), ("elastic", elastic)):
        weights, losses = _diffs(run, one)
        results[f"{name}_max_weight_diff"] = weights
        results[f"{name}_max_loss_diff"] = losses
    print(json.dumps(results, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
