"""Shared test settings."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """Run a test on one torch thread (tiny models: threads only add overhead), then restore."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
