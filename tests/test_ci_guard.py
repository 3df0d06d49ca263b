"""Under CI=true a test that skips itself (missing shared data, a missing oracle library) fails;
locally it skips. Checked on a throwaway test directory that uses this suite's conftest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CASES = '''
import pytest

def test_missing_data():
    pytest.skip("shared data directory not found")

@pytest.mark.skipif(True, reason="opt-in slow test")
def test_declared_skip():
    pass

@pytest.mark.skipif(False, reason="a marker whose condition is false")
def test_marked_but_skips_at_run_time():
    pytest.skip("shared data directory not found")
'''


def _pytest(directory: Path, ci: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CI": ci}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(directory)],
                          env=env, capture_output=True, text=True, cwd=directory)


def test_a_skip_fails_under_ci_and_skips_locally(tmp_path):
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "test_import.py").write_text('import pytest\npytest.importorskip("no_such_module_x")\n')
    ci = _pytest(tmp_path, "true")
    assert ci.returncode != 0 and "ERROR test_import.py" in ci.stdout  # collection fails
    (tmp_path / "test_import.py").unlink()
    ci = _pytest(tmp_path, "true")
    assert "2 failed, 1 skipped" in ci.stdout, ci.stdout
    assert "FAILED test_cases.py::test_marked_but_skips_at_run_time" in ci.stdout
    local = _pytest(tmp_path, "")
    assert local.returncode == 0 and "3 skipped" in local.stdout, local.stdout
