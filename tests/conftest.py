"""Shared test settings.

Under ``CI=true`` a test may not skip itself: the CI machine has the shared data and every dev
extra, so a missing data file or oracle library there is a broken set-up, and a skip would
hide it. Skips declared up front with ``skipif`` markers (opt-in slow tests) still skip.
"""

from __future__ import annotations

import os

import pytest
import torch

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Under pytest-xdist every worker is a process of its own: the cores are split between them, so
# that two workers' torch thread pools do not fight over the same cores.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
if _WORKERS > 1:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _WORKERS))


@pytest.fixture
def one_thread():
    """Run a test on one torch thread (tiny models: threads only add overhead), then restore."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _skip_reason(longrepr) -> str:
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI, a skip raised while a test runs (missing data, ``importorskip``) is a failure."""
    outcome = yield
    report = outcome.get_result()
    declared = call.when == "setup" and item.get_closest_marker("skipif") is not None  # a true skipif
    if IN_CI and report.skipped and not hasattr(report, "wasxfail") and not declared:
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where nothing may be missing: {_skip_reason(report.longrepr)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Under CI, a module that skips itself at import (``importorskip``) fails to collect."""
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where nothing may be missing: {_skip_reason(report.longrepr)}"
