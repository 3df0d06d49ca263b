"""Give freed heap memory back to the system while serving.

Batches of different shapes allocate and free tensors of ever-changing sizes on the model's
thread. glibc's malloc keeps freed chunks in its arenas and raises its mmap threshold as large
blocks are freed, so under sustained load the resident size of the server drifts upward even
though the live memory does not (the overload benchmark saw it climb for as long as the load
lasted). :class:`HeapTrimmer` calls ``malloc_trim(0)`` (which also returns free pages inside the
arenas) from the model's thread at most every ``interval`` seconds, between batches; where
there is no glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import time

log = logging.getLogger(__name__)


def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return libc.malloc_trim if libc is not None else None
    except (OSError, AttributeError):
        return None


class HeapTrimmer:
    """``maybe()`` after each batch: trims when ``interval`` seconds have passed since the last trim."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.trim = _malloc_trim() if interval > 0 else None
        if self.trim is not None:
            self.trim.argtypes, self.trim.restype = [ctypes.c_size_t], ctypes.c_int
        self.last = time.monotonic()
        self.count = 0

    def maybe(self) -> None:
        if self.trim is None or time.monotonic() - self.last < self.interval:
            return
        self.trim(0)
        self.count += 1
        self.last = time.monotonic()
