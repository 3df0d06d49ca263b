"""Give freed heap memory back to the system during long loops (training steps, served batches).

Batches of different shapes allocate and free tensors of ever-changing sizes. glibc's malloc
keeps freed chunks in its arenas and, once a large block has been freed, raises its mmap
threshold (up to 32 MB), so later tensors below it come from the heap, where freed holes between
live blocks are never returned. The resident size then drifts upward although the live memory
does not: a server under sustained load, a fine-tuning run on length-sorted batches.
:class:`HeapTrimmer` gives the free pages back at most every ``interval`` seconds, between steps
or batches, from the thread that allocates: through glibc's ``malloc_trim(0)`` (which also
returns the free pages inside the arenas, not only the top of the heap), or through tcmalloc's
``ReleaseFreeMemory`` when the process runs on tcmalloc (:mod:`muppets.malloc`, the default of
the ``muppets`` command where it is installed); under any other malloc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time

from muppets.malloc import malloc_in_use


def _release_function():
    """The call that gives the malloc's free pages back to the system: tcmalloc's
    ``MallocExtension_ReleaseFreeMemory`` when tcmalloc is loaded, glibc's ``malloc_trim(0)``
    when glibc's malloc is the one in use; None otherwise (jemalloc purges on its own clock)."""
    try:
        process = ctypes.CDLL(None)
    except OSError:
        process = None
    release = getattr(process, "MallocExtension_ReleaseFreeMemory", None)
    if release is not None:
        release.argtypes, release.restype = [], None
        return release
    if malloc_in_use() != "system":
        return None
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


class HeapTrimmer:
    """``maybe()`` after each step or batch: gives free pages back when ``interval`` seconds have
    passed since the last time (``interval`` 0: never), through glibc's ``malloc_trim`` or
    tcmalloc's release. ``count`` and ``seconds`` say how many trims ran and what they cost."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.trim = _release_function() if interval > 0 else None
        self.last = time.monotonic()
        self.count = 0
        self.seconds = 0.0

    def maybe(self) -> None:
        if self.trim is None or time.monotonic() - self.last < self.interval:
            return
        start = time.perf_counter()
        self.trim()
        self.seconds += time.perf_counter() - start
        self.count += 1
        self.last = time.monotonic()
