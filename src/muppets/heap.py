"""Give freed heap memory back to the system during long loops (training steps, served batches).

Batches of different shapes allocate and free tensors of ever-changing sizes. glibc's malloc
keeps freed chunks in its arenas and, once a large block has been freed, raises its mmap
threshold (up to 32 MB), so later tensors below it come from the heap, where freed holes between
live blocks are never returned. The resident size then drifts upward although the live memory
does not: a server under sustained load, a fine-tuning run on length-sorted batches.
:class:`HeapTrimmer` calls ``malloc_trim(0)`` (which also returns the free pages inside the
arenas, not only the top of the heap) at most every ``interval`` seconds, between steps or
batches, from the thread that allocates; where there is no glibc it does nothing. A different
malloc (tcmalloc through ``LD_PRELOAD``) avoids most of the growth by itself (BENCHMARKS.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time


def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return libc.malloc_trim if libc is not None else None
    except (OSError, AttributeError):
        return None


class HeapTrimmer:
    """``maybe()`` after each step or batch: trims when ``interval`` seconds have passed since the
    last trim (``interval`` 0: never). ``count`` and ``seconds`` say how many trims ran and what they cost."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.trim = _malloc_trim() if interval > 0 else None
        if self.trim is not None:
            self.trim.argtypes, self.trim.restype = [ctypes.c_size_t], ctypes.c_int
        self.last = time.monotonic()
        self.count = 0
        self.seconds = 0.0

    def maybe(self) -> None:
        if self.trim is None or time.monotonic() - self.last < self.interval:
            return
        start = time.perf_counter()
        self.trim(0)
        self.seconds += time.perf_counter() - start
        self.count += 1
        self.last = time.monotonic()
