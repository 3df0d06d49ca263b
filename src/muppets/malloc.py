"""The malloc the ``muppets`` command runs on: tcmalloc where it is installed.

Training and serving allocate and free tensors of ever-changing sizes. glibc's malloc keeps the
holes this leaves in its heap (:mod:`muppets.heap` trims them now and then); tcmalloc keeps
per-size free lists instead, which halved a fine-tune's peak memory and was faster
(BENCHMARKS.md, "Fine-tuning memory"). A malloc can only be replaced before the process starts,
through ``LD_PRELOAD``, so the command re-executes itself once, on Linux, with the library
preloaded (:func:`use_malloc`, called by the ``muppets`` entry point :func:`muppets.cli.run`;
``torch.backends.xeon.run_cpu`` does the same). ``$MUPPETS_MALLOC`` chooses:

* ``auto`` (the default, also when empty): tcmalloc where it is installed, else the system's;
* ``tcmalloc`` or ``jemalloc``: that one, an error when it is not installed;
* ``system``: no preload;
* the path of a malloc library.

A malloc the user already put in ``LD_PRELOAD`` is kept. The allocator changes no number.
"""

from __future__ import annotations

import logging
import os
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path

from muppets.errors import ConfigError

log = logging.getLogger(__name__)

MALLOC_ENV = "MUPPETS_MALLOC"
# set for the re-executed process by its first incarnation: the library it preloaded, then the
# names of the other variables it added (taken out again, with the library, once it runs)
_PRELOADED_ENV = "MUPPETS_MALLOC_PRELOADED"
MALLOCS: dict[str, tuple[str, ...]] = {
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"),
    "jemalloc": ("libjemalloc.so.2",),
}
# library names (before ".so") of the mallocs known when they are preloaded or mapped
_MALLOC_STEMS = ("libtcmalloc", "libjemalloc", "libmimalloc", "libhoard", "libsnmalloc")
_decided = False  # use_malloc ran in this process: never re-execute twice


def _is_malloc(path: str) -> bool:
    name = Path(path).name
    return name.startswith(_MALLOC_STEMS) or "malloc" in name.split(".so")[0]


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
    the system's malloc is asked for, ``auto`` finds no tcmalloc, or ``LD_PRELOAD`` already holds
    a malloc (the user's choice, kept; a setting other than ``auto`` is then logged as overridden).
    Raises ``ConfigError`` for an unknown value, a path that the loader would split (a space or a
    colon) or that does not exist, and a named malloc that is not installed."""
    choice = env.get(MALLOC_ENV, "").strip() or "auto"
    if choice not in ("auto", "system", *MALLOCS) and "/" not in choice:
        raise ConfigError(f"{MALLOC_ENV}={choice!r}: expected auto, system, {', '.join(MALLOCS)} "
                          "or the path of a malloc library")
    if "/" in choice:
        if any(c in choice for c in ": \t"):
            raise ConfigError(f"{MALLOC_ENV}={choice!r}: LD_PRELOAD cannot hold a path with a space or a colon")
        if not Path(choice).is_file():
            raise ConfigError(f"{MALLOC_ENV}={choice!r}: no such file")
    user = [p for p in env.get("LD_PRELOAD", "").replace(" ", ":").split(":") if p and _is_malloc(p)]
    if user:
        if choice not in ("auto", "system"):
            log.warning("%s=%s: LD_PRELOAD already loads %s, which is kept", MALLOC_ENV, choice, user[0])
        return None
    if choice == "system":
        return None
    if "/" in choice:
        return choice
    dirs = library_dirs(env) if dirs is None else dirs
    path = find_malloc("tcmalloc" if choice == "auto" else choice, dirs)
    if path is None and choice != "auto":
        raise ConfigError(
            f"{MALLOC_ENV}={choice}: none of {', '.join(MALLOCS[choice])} is in {', '.join(dirs)}; "
            f"install it (Debian/Ubuntu: apt-get install "
            f"{'libtcmalloc-minimal4' if choice == 'tcmalloc' else 'libjemalloc2'}) "
            f"or set {MALLOC_ENV}=system")
    if path is not None and any(c in path for c in ": \t"):
        log.warning("%s: %s cannot be preloaded (a space or a colon in its path)", MALLOC_ENV, path)
        return None
    return path


def _mapped_paths() -> set[str]:
    """The files mapped into this process (``/proc/self/maps``; empty where there is none)."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return set()
    return {parts[5] for line in lines if len(parts := line.split(maxsplit=5)) == 6}


def malloc_in_use() -> str:
    """The malloc this process runs on: the path of a preloaded malloc library mapped into it
    (tcmalloc in any build, jemalloc, mimalloc, …), else ``"system"``."""
    return next((p for p in sorted(_mapped_paths()) if _is_malloc(p)), "system")


def use_malloc() -> None:
    """Re-execute this program (same interpreter, same arguments: ``sys.orig_argv``) with the
    malloc that ``$MUPPETS_MALLOC`` asks for preloaded; return at once when there is none to load.
    In the re-executed process, check that the library was loaded (a warning names the setting
    if not), and take our variables back out of the environment, so that the programs it starts
    (a browser, a shell) run as they would have and a ``muppets`` it starts chooses again. Acts
    once per process: a second call returns."""
    global _decided
    if _decided:
        return
    _decided = True
    marker = os.environ.pop(_PRELOADED_ENV, None)
    if marker is not None:
        preloaded, _, added = marker.partition("\n")
        rest = [p for p in os.environ.get("LD_PRELOAD", "").split(":") if p and p != preloaded]
        if rest:
            os.environ["LD_PRELOAD"] = ":".join(rest)
        else:
            os.environ.pop("LD_PRELOAD", None)
        for key in filter(None, added.split(",")):
            os.environ.pop(key, None)
        if os.path.realpath(preloaded) not in {os.path.realpath(p) for p in _mapped_paths()}:
            log.warning("%s=%s: %s was not loaded (not a library for this machine?); running on the "
                        "system's malloc", MALLOC_ENV, os.environ.get(MALLOC_ENV, "auto"), preloaded)
        return
    if not sys.platform.startswith("linux") or malloc_in_use() != "system":
        return
    path = malloc_to_preload(os.environ)
    if path is None:
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join(p for p in (path, env.get("LD_PRELOAD", "")) if p)
    added = []
    if "tcmalloc" in Path(path).name and "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD" not in env:
        # tcmalloc reports every allocation above 1 GB on stderr; a model's weights can be one
        env["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"] = str(1 << 40)
        added.append("TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD")
    env[_PRELOADED_ENV] = path + "\n" + ",".join(added)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    except OSError as err:  # the program goes on, on the system's malloc
        log.warning("could not restart on %s (%s); running on the system's malloc", path, err)
