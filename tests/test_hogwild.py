"""The Hogwild pool's processes: they do not outlive a killed parent."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

WORKER = '''
import os, signal, sys, time
from muppets.train.hogwild import HogwildPool

class Idle:
    def setup(self):
        return str(os.getpid())
    def run(self, epoch, chunk):
        return {}

if __name__ == "__main__":
    with HogwildPool(Idle(), 2) as pool:
        print(" ".join(pool.notes), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no clean exit: the pool's processes are orphaned
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def test_pool_processes_exit_when_the_parent_is_killed(tmp_path):
    script = tmp_path / "killed_parent.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == -9, run.stderr
    children = [int(p) for p in run.stdout.split()]
    assert len(children) == 2
    deadline = time.monotonic() + 15
    while any(_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in children), "a Hogwild process outlived its killed parent"
