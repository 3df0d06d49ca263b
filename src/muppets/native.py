"""Small C kernels compiled once per machine with the system C compiler and loaded with ctypes.

Used where a loop of many tiny torch ops costs more in dispatch than in arithmetic: the word2vec
update (:mod:`muppets.models.word2vec_native`) and the batch-1 decoding step
(:mod:`muppets.nn.decode_native`). :func:`load` builds ``cc -O3 -march=native`` into
``$MUPPETS_CACHE/native`` (default ``~/.cache/muppets/native``), named by a hash of the source,
the flags, the compiler and the CPU, so each machine compiles a kernel once (about a second),
atomically (several processes may race), and returns None when no compiler works, so every
caller keeps a torch path.

``openmp=True`` compiles with ``-fopenmp``. The library then needs ``libgomp.so.1``, which the
dynamic linker finds already loaded by torch (its CPU wheels run their intra-op threads on
GNU OpenMP), so a parallel region of the kernel runs on the same thread pool as torch's own
operators: it starts no thread of its own and follows ``torch.get_num_threads()`` when the caller
passes it. Where torch's parallel backend is not OpenMP the flag is dropped and the kernel runs
on one thread.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

log = logging.getLogger(__name__)

# no -ffast-math: linked into a shared library it would switch the whole process to flushing
# denormals; the reassociation flags are what lets scalar dot products vectorise (a kernel whose
# sums must run in the order written leaves them out: ``reassociate=False``)
FLAGS = ["-O3", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math"]
REASSOCIATE = ["-fassociative-math", "-fno-signed-zeros"]
Signature = tuple[object, Sequence[object]]  # (restype, argtypes) of one exported function
_loaded: dict[str, ctypes.CDLL | None] = {}


def cache_dir() -> Path:
    root = os.environ.get("MUPPETS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "muppets")
    return Path(root) / "native"


def compiler() -> str | None:
    """``$CC``, else ``cc``, ``gcc`` or ``clang`` on the PATH; None when there is none."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def _cpu() -> str:
    """What ``-march=native`` depends on: the first CPU's model and instruction-set lines (x86
    ``flags``, ARM ``Features``), so a cache shared between machines never loads another CPU's
    build."""
    keys = ("vendor_id", "model name", "flags", "Features", "CPU implementer", "CPU part")
    try:
        lines = Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:
        return platform.processor()
    first: dict[str, str] = {}
    for line in lines:
        name = line.split(":", 1)[0].strip()
        if name in keys and name not in first:
            first[name] = line
    return "\n".join(first.get(k, "") for k in keys) or platform.processor()


def torch_uses_openmp() -> bool:
    """Does torch run its intra-op threads on OpenMP (the pool a ``-fopenmp`` kernel joins)?"""
    return "ATen parallel backend: OpenMP" in torch.__config__.parallel_info()


def _compile(cc: str, name: str, source: str, flags: list[str], target: Path) -> bool:
    """Compile ``source`` to ``target`` (atomically: several worker processes may race)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src, out = Path(tmp) / f"{name}.c", Path(tmp) / target.name
        src.write_text(source)
        for arch in (["-march=native"], []):
            done = subprocess.run([cc, *flags, *arch, str(src), "-o", str(out), "-lm"],
                                  capture_output=True, text=True)
            if done.returncode == 0:
                os.replace(out, target)
                return True
        log.warning("%s could not compile the %s kernel: %s", cc, name, done.stderr.strip()[:300])
        return False


def load(name: str, source: str, functions: dict[str, Signature], openmp: bool = False,
         reassociate: bool = True) -> ctypes.CDLL | None:
    """The library built from ``source`` (compiled on first use) with ``functions``' signatures
    set, or None when there is no working C compiler or it cannot be loaded."""
    cc = compiler()
    if cc is None:
        return None
    flags = FLAGS + (REASSOCIATE if reassociate else []) + (["-fopenmp"] if openmp and torch_uses_openmp() else [])
    key = hashlib.sha256("\0".join([source, *flags, cc, _cpu(), platform.machine()]).encode()).hexdigest()[:16]
    if key in _loaded:
        return _loaded[key]
    target = cache_dir() / f"{name}-{key}.so"
    lib = None
    try:
        if target.is_file() or _compile(cc, name, source, flags, target):
            lib = ctypes.CDLL(str(target))
            for fn_name, (restype, argtypes) in functions.items():
                fn = getattr(lib, fn_name)
                fn.restype, fn.argtypes = restype, list(argtypes)
    except (OSError, AttributeError) as err:
        log.warning("the compiled %s kernel could not be loaded: %s", name, err)
        lib = None
    _loaded[key] = lib
    return lib
