"""Give freed heap memory back to the system during long loops (training steps, served batches).

Batches of different shapes allocate and free tensors of ever-changing sizes. glibc's malloc
keeps freed chunks in its arenas and, once a large block has been freed, raises its mmap
threshold (up to 32 MB), so later tensors below it come from the heap, where freed holes between
live blocks are never returned. The resident size then drifts upward although the live memory
does not: a server under sustained load, a fine-tuning run on length-sorted batches.
:class:`HeapTrimmer` calls ``malloc_trim(0)`` (which also returns the free pages inside the
arenas, not only the top of the heap) at most every ``interval`` seconds, between steps or
batches, from the thread that allocates; where there is no glibc it does nothing.

A different malloc avoids most of the growth by itself, and is faster on these workloads:
tcmalloc keeps per-size free lists instead of one heap (BENCHMARKS.md, "Fine-tuning memory").
A malloc can only be replaced before the process starts, through ``LD_PRELOAD``, so the
``muppets`` command re-executes itself once with the library preloaded (:func:`use_malloc`),
as ``torch.backends.xeon.run_cpu`` does. ``$MUPPETS_MALLOC`` chooses: ``auto`` (the default:
tcmalloc where it is installed, else the system's), ``tcmalloc`` or ``jemalloc`` (an error
when missing), ``system``, or the path of a library. An ``LD_PRELOAD`` that already names a
malloc is the user's choice and is left alone. Numbers do not change with the allocator.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
import sysconfig
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from muppets.errors import ConfigError

log = logging.getLogger(__name__)

MALLOC_ENV = "MUPPETS_MALLOC"
# set by the re-executed process's parent: the library it preloaded (and the guard against a loop)
_PRELOADED_ENV = "MUPPETS_MALLOC_PRELOADED"
MALLOCS: dict[str, tuple[str, ...]] = {
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"),
    "jemalloc": ("libjemalloc.so.2",),
}


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


def library_dirs(env: Mapping[str, str] = os.environ) -> list[str]:
    """Where the dynamic loader looks for a preloaded library by default: ``$LD_LIBRARY_PATH``,
    then the system's directories (Debian's multiarch one first)."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += [f"/usr/lib/{multiarch}", f"/lib/{multiarch}"] if multiarch else []
    return dirs + ["/usr/local/lib", "/usr/lib64", "/usr/lib", "/lib64", "/lib"]


def find_malloc(name: str, dirs: Sequence[str]) -> str | None:
    """The path of ``name``'s library (a key of :data:`MALLOCS`) in ``dirs``, or None."""
    for soname in MALLOCS[name]:
        for d in dirs:
            path = Path(d) / soname
            if path.is_file():
                return str(path)
    return None


def malloc_to_preload(env: Mapping[str, str], dirs: Sequence[str] | None = None) -> str | None:
    """The library that ``$MUPPETS_MALLOC`` asks to preload, or None when nothing is to be done:
    the system's malloc is asked for, ``auto`` finds no tcmalloc, the process already runs with
    a preloaded malloc (ours, or one the user put in ``LD_PRELOAD``). Raises ``ConfigError``
    for an unknown value or a named malloc that is not installed."""
    choice = env.get(MALLOC_ENV, "").strip() or "auto"
    if choice not in ("auto", "system", *MALLOCS) and "/" not in choice:
        raise ConfigError(f"{MALLOC_ENV}={choice!r}: expected auto, system, {', '.join(MALLOCS)} "
                          "or the path of a malloc library")
    preloaded = env.get("LD_PRELOAD", "")
    if _PRELOADED_ENV in env or "malloc" in preloaded:
        return None
    if choice == "system":
        return None
    if "/" in choice:
        if not Path(choice).is_file():
            raise ConfigError(f"{MALLOC_ENV}={choice!r}: no such file")
        return choice
    dirs = library_dirs(env) if dirs is None else dirs
    path = find_malloc("tcmalloc" if choice == "auto" else choice, dirs)
    if path is None and choice != "auto":
        raise ConfigError(
            f"{MALLOC_ENV}={choice}: none of {', '.join(MALLOCS[choice])} is in {', '.join(dirs)}; "
            f"install it (Debian/Ubuntu: apt-get install "
            f"{'libtcmalloc-minimal4' if choice == 'tcmalloc' else 'libjemalloc2'}) "
            f"or set {MALLOC_ENV}=system")
    return path


def use_malloc() -> None:
    """Re-execute this program (same interpreter, same arguments) with the malloc that
    ``$MUPPETS_MALLOC`` asks for preloaded; return at once when there is none to load. In the
    re-executed process, take our entries back out of the environment, so that the programs it
    starts (a browser, a shell) run as they would have, and a ``muppets`` it starts chooses again."""
    preloaded = os.environ.pop(_PRELOADED_ENV, None)
    if preloaded is not None:
        rest = [p for p in os.environ.get("LD_PRELOAD", "").split(":") if p and p != preloaded]
        if rest:
            os.environ["LD_PRELOAD"] = ":".join(rest)
        else:
            os.environ.pop("LD_PRELOAD", None)
        return
    if not sys.platform.startswith("linux"):
        return
    path = malloc_to_preload(os.environ)
    if path is None:
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join(p for p in (path, env.get("LD_PRELOAD", "")) if p)
    env[_PRELOADED_ENV] = path
    # tcmalloc reports every allocation above 1 GB on stderr; a model's weights are one
    env.setdefault("TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD", str(1 << 40))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    except OSError as err:  # the program goes on, on the system's malloc
        log.warning("could not restart on %s (%s); running on the system's malloc", path, err)


def malloc_in_use() -> str:
    """The malloc this process runs on: the path of a preloaded tcmalloc or jemalloc mapped into
    it, else ``"system"`` (read from ``/proc/self/maps``; ``"system"`` where there is none)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "system"
    for line in maps.splitlines():
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if any(Path(path).name.startswith(soname.split(".so")[0] + ".so")
               for sonames in MALLOCS.values() for soname in sonames):
            return path
    return "system"
