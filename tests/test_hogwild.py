"""The Hogwild pool's processes: they do not outlive a killed parent, nor a failed start-up."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from muppets.train.hogwild import HogwildPool

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


class SecondSetupFails:
    """The first process to claim ``claim`` sets up; the next one raises (picklable: module level)."""

    def __init__(self, claim: Path) -> None:
        self.claim = claim

    def setup(self) -> str:
        os.close(os.open(self.claim, os.O_CREAT | os.O_EXCL))  # FileExistsError in the second process
        return str(os.getpid())

    def run(self, epoch: int, chunk: int) -> dict[str, float]:
        return {}


def test_a_failed_setup_stops_and_joins_every_started_process(tmp_path):
    pool = HogwildPool(SecondSetupFails(tmp_path / "claimed"), 2)
    with pytest.raises(RuntimeError, match="FileExistsError"):
        with pool:
            pytest.fail("the pool started although a process failed to set up")
    assert all(proc.exitcode is not None for proc in pool.procs), "a started process was not joined"
    assert not any(_alive(proc.pid) for proc in pool.procs)
    assert multiprocessing.active_children() == []
