"""benchmarks/gpu_check.py's dry run (its CPU half, tiny sizes): every command runs, reports a
speed, and its agreement checks against transformers (and served vs offline vectors) pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {"pretrain_bert", "pretrain_gpt", "finetune", "generate", "embed", "serve"}


def test_gpu_check_dry_run(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks/gpu_check.py"), "--cpu-only", "--out", str(out)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "CPU half only" in run.stdout
    result = json.loads(out.read_text())
    assert set(result["runs"]) == {"cpu"} and set(result["runs"]["cpu"]) == COMMANDS
    assert all(r["tokens_per_s"] > 0 for r in result["runs"]["cpu"].values())
    checked = {c["command"] for c in result["checks"]}
    assert checked == COMMANDS and all(c["ok"] for c in result["checks"]) and result["ok"]
    assert result["machine"]["torch"] and result["machine"]["cpu"]
