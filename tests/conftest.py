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


# The files that hold the suite's longest tests (each 20 s to 2.5 min on one of two workers, from
# the suite's --durations), the longest first: they run before the rest, so that the workers end
# together on short tests instead of one worker finishing a long one alone. Whole files move, in
# their own order, so a module-scoped fixture is still built once.
LONG_FIRST = ("tests/test_docs.py", "tests/test_docs_tutorials.py", "tests/test_selection.py",
              "tests/test_pretrain_e2e.py", "tests/test_multitask.py", "tests/test_malloc.py",
              "tests/test_feature_transfer.py", "tests/test_stream_memory.py")


def pytest_collection_modifyitems(config, items) -> None:
    """The files of :data:`LONG_FIRST` first, in that order (the sort is stable: the rest keep theirs)."""
    def rank(item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return LONG_FIRST.index(path) if path in LONG_FIRST else len(LONG_FIRST)

    items.sort(key=rank)


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


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    """Run a test with torch on one intra-op thread and on two, then restore the count."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)
