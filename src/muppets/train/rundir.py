"""What a training command may do with a run directory that already holds files.

A directory the user named is never overwritten by surprise:

- **A fresh start** (no checkpoint to resume, or ``--fresh``) writes ``config.json`` and
  ``log.jsonl``, so it is refused (:class:`~muppets.errors.RunDirError`) where that would destroy
  something: the checkpoints of an earlier run (only ``--fresh`` gets there with them), or a
  ``config.json`` / ``log.jsonl`` that a run of this kind did not write (a user's own files, or a
  run of another command), and where an earlier run trained though its checkpoints were
  deleted (its log records steps, or it left ``final/`` or ``summary.json``). A run of the same
  kind stopped before its first step starts again, as it always did.
- **One run at a time**: a run holds an exclusive lock on its directory (:func:`run_lock`, rank 0
  under ``torchrun``) from its first stage to its last write; a second run started there gets a
  :class:`~muppets.errors.RunDirError`. The operating system drops the lock when the process
  ends, so a killed run leaves nothing that blocks the next.
- **A resume with other settings** keeps the record of the old ones: the previous
  ``config.json`` is kept as ``config.step-<N>.json`` before the new one is written, and resuming
  a *finished* run with other settings (the whole run config and the derived training settings)
  is refused: nothing would be trained, and the run's ``config.json`` and metrics would name
  settings its model was not trained with. Settings that only change how a run is watched, paced
  or placed (:data:`PACING_KEYS`) may always change.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # not on a POSIX system: runs are not locked
    fcntl = None

from muppets.errors import RunDirError
from muppets.train.checkpoint import latest_checkpoint, read_state
from muppets.train.logger import LOG_FILE, read_log

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
FINISHED_FILES = ("final", "summary.json")  # what a finished pretraining run leaves besides its log
# settings (the last part of a dotted key) that change neither the batches, the updates nor the
# scores of a run: how it is watched, paced and placed
PACING_KEYS = frozenset({"threads", "progress", "plot", "tensorboard", "report_to", "tracking_uri", "log_every",
                         "trim_heap_seconds", "max_minutes", "eval_every", "checkpoint_every", "keep_checkpoints",
                         "run_dir", "device", "eval_batch_size"})


def earlier_run(run_dir: Path, checkpoint: Path) -> RunDirError:
    """The error of a fresh start where an earlier run's ``checkpoint`` lies."""
    return RunDirError(f"{run_dir} holds the checkpoints of an earlier run (the latest: {checkpoint}); a fresh start "
                       f"would overwrite them and its log: resume it (run without --fresh), delete that directory, "
                       f"or choose another run_dir")


def check_fresh_start(run_dir: Path, run_config: dict[str, Any], earlier: Path | None) -> None:
    """Raise :class:`RunDirError` when starting a run at step 0 in ``run_dir`` would overwrite
    ``earlier`` (the complete checkpoint of an earlier run found there, if any), or a
    ``config.json`` / ``log.jsonl`` that is not an earlier start of a run of this kind (a JSON
    object with the same top-level keys as ``run_config``)."""
    run_dir = Path(run_dir)
    if earlier is not None:
        raise earlier_run(run_dir, earlier)
    config, log = run_dir / CONFIG_FILE, run_dir / LOG_FILE
    if config.exists():
        try:
            old = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise RunDirError(f"{config}: not a config.json muppets wrote ({type(error).__name__}: {error}); "
                              f"a run would overwrite it: choose another run_dir") from None
        if not isinstance(old, dict) or set(old) != set(run_config):
            extra = sorted(set(old) ^ set(run_config)) if isinstance(old, dict) else [type(old).__name__]
            raise RunDirError(f"{config}: not the config of a run of this kind (its keys differ: {extra[:6]}); "
                              f"a run would overwrite it and {LOG_FILE}: choose another run_dir")
    elif log.exists():
        raise RunDirError(f"{log}: a log without the {CONFIG_FILE} a muppets run writes beside it; a run would "
                          f"overwrite it: choose another run_dir")
    _check_no_trained_run(run_dir)


def _check_no_trained_run(run_dir: Path) -> None:
    """Refuse a fresh start where an earlier run trained, though its checkpoints are gone: its
    log records steps, or it left ``final/`` or ``summary.json``."""
    left = [name for name in FINISHED_FILES if (run_dir / name).exists()]
    try:
        steps = [r["step"] for r in read_log(run_dir, strict=False) if type(r.get("step")) is int and r["step"] > 0]
    except (OSError, UnicodeDecodeError):
        left.insert(0, f"{LOG_FILE}, unreadable")
    else:
        left[:0] = [f"{LOG_FILE} with steps 1-{max(steps)}"] if steps else []
    if left:
        raise RunDirError(f"{run_dir} holds what an earlier run trained ({', '.join(left)}), though not its "
                          f"checkpoints; a fresh start would overwrite it: delete that directory, or choose another "
                          f"run_dir")


def check_start(run_dir: Path, run_config: dict[str, Any], steps: int, resume: bool = True,
                inputs: Collection[str] = (), after_training: Collection[str] = ()) -> None:
    """Decide before anything is written into ``run_dir`` what :class:`~muppets.train.Trainer`
    decides there only once the run's inputs are made, so that a refusal destroys nothing: a
    fresh start (no checkpoint, or ``resume`` False) that would overwrite an earlier run
    (:func:`check_fresh_start`); a run finished at ``steps`` asked again with other settings
    (:func:`check_resume`); and a resume whose settings under ``inputs`` (dotted prefixes, e.g.
    ``tokenizer.``) changed: its model was trained on the ids of its own tokenizer.
    ``after_training`` are the keys that steer only what follows the trained steps
    (:func:`effective_changes`' ``free``)."""
    earlier = latest_checkpoint(Path(run_dir))
    if not resume or earlier is None:
        check_fresh_start(run_dir, run_config, earlier)
        return
    state = read_state(earlier)
    changed = changed_settings(state.run_config, run_config)
    moved = {k: v for k, v in changed.items() if k.startswith(tuple(inputs))}
    if moved:
        raise RunDirError(f"{earlier}: this run was trained on the ids its own inputs give ({describe(moved)}); "
                          f"resuming would feed its model other ids: run it with its own settings (its config.json), "
                          f"or choose another run_dir")
    if state.step >= steps and effective_changes(changed, after_training):
        check_resume(earlier, state.step, steps, changed, after_training)


def run_name(run_dir: Path) -> str:
    """A run's name in plot titles and trackers: the last two parts of its directory
    (``sst2-bert-mix/seed-1``)."""
    return "/".join(Path(run_dir).resolve().parts[-2:])


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a.b": value}`` of a nested config dict (lists are values)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def changed_settings(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{dotted key: (saved, current)}`` of the settings that differ between two nested configs
    (keys that only one of them has, such as settings added since, are skipped)."""
    a, b = (flatten(json.loads(json.dumps(c))) for c in (saved, current))  # as config.json holds them (tuples → lists)
    return {k: (v, b[k]) for k, v in a.items() if k in b and b[k] != v}


def _brief(value: Any) -> Any:
    """A setting as a message shows it: a list of named sections (a task list) by their names."""
    if isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value):
        return [v["name"] for v in value]
    return value


def describe(changed: dict[str, tuple[Any, Any]]) -> str:
    """``key: old -> new; …`` of :func:`changed_settings`' result, sorted by key."""
    return "; ".join(f"{k}: {_brief(a)!r} -> {_brief(b)!r}" for k, (a, b) in sorted(changed.items()))


def effective_changes(changed: dict[str, tuple[Any, Any]], free: Collection[str] = ()) -> dict[str, tuple[Any, Any]]:
    """The changes of :func:`changed_settings` that change what a run trains: :data:`PACING_KEYS`
    and the caller's ``free`` keys (a dotted key, its last part, or a section ending in ``.``,
    e.g. ``transfer.``, for every key under it) aside."""
    free = PACING_KEYS | frozenset(free)
    sections = tuple(f for f in free if f.endswith("."))
    return {k: v for k, v in changed.items()
            if k.rpartition(".")[2] not in free and k not in free and not k.startswith(sections)}


def check_resume(checkpoint: Path, step: int, steps: int, changed: dict[str, tuple[Any, Any]],
                 after_training: Collection[str] = ()) -> None:
    """Refuse resuming a finished run (``step >= steps``) with other settings than it was
    trained with, pacing and the caller's ``after_training`` keys aside (settings that only steer
    what happens after the trained steps); warn when an unfinished run goes on with other settings."""
    if not changed:
        return
    text = describe(changed)
    effective = effective_changes(changed, after_training)
    if step >= steps and effective:
        names = ", ".join(sorted(effective))
        raise RunDirError(
            f"{checkpoint}: this run finished at step {step}, trained with other settings ({text}); nothing would be "
            f"trained, and its config and metrics would name {names} it was not trained with: run it with its own "
            f"settings (its config.json), or choose another run_dir")
    logger.warning("resuming with changed settings: %s", text)


def keep_previous_config(run_dir: Path, run_config: dict[str, Any], step: int) -> Path | None:
    """Before ``config.json`` is rewritten on a resume: when it differs from ``run_config``, copy it
    to ``config.step-<step>.json`` (once) so the settings of the steps before stay on record."""
    config = Path(run_dir) / CONFIG_FILE
    old = saved_config(run_dir)
    if old is None or old == json.loads(json.dumps(run_config)):
        return None
    kept = config.with_name(f"config.step-{step:08d}.json")
    if not kept.exists():
        shutil.copyfile(config, kept)
        logger.info("the settings of steps 1-%d differ from this command's: kept as %s", step, kept)
    return kept


def saved_config(run_dir: Path) -> dict[str, Any] | None:
    """The settings ``run_dir/config.json`` records (None: no such file, or not a JSON object)."""
    try:
        old = json.loads((Path(run_dir) / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return old if isinstance(old, dict) else None


LOCK_FILE = ".run.lock"  # held (flock) by the run working in the directory; deleted when it ends
_HELD: dict[str, int] = {}  # real path of a run directory this process locks -> nesting depth


@contextlib.contextmanager
def run_lock(run_dir: Path, enabled: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on ``run_dir`` (created if missing) for the block: a second run in
    the same directory, from another process, raises :class:`RunDirError` naming it. A hold
    nested in one that this process has already (a recipe's, then its trainer's) takes nothing
    more. The lock is ``flock`` on :data:`LOCK_FILE`, which the operating system releases when
    the process dies, so a killed run blocks no one; ``enabled`` False (a rank other than 0)
    holds nothing."""
    run_dir = Path(run_dir)
    key = os.path.realpath(run_dir)
    if not enabled or fcntl is None or key in _HELD:
        yield
        return
    _HELD[key] = _acquire(run_dir)
    try:
        yield
    finally:
        _release(run_dir, _HELD.pop(key))


def _acquire(run_dir: Path) -> int | None:
    """The open, locked :data:`LOCK_FILE` of ``run_dir`` (None: this file system locks nothing)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
            os.close(fd)
            raise RunDirError(f"{run_dir} is in use by another run (process {holder}, holding {path}): wait for it "
                              f"to end, or choose another run_dir") from None
        except OSError as error:  # e.g. a network file system without locks
            os.close(fd)
            logger.warning("cannot lock %s (%s): nothing keeps a second run out of %s", path, error, run_dir)
            return None
        if _same_file(fd, path):  # else the run that held it deleted it between open and flock: again
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} on {socket.gethostname()}\n".encode())
            return fd
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _release(run_dir: Path, fd: int | None) -> None:
    """Delete the lock file while still holding it (no one else can hold it), then let go."""
    if fd is not None:
        with contextlib.suppress(OSError):
            (run_dir / LOCK_FILE).unlink()
        os.close(fd)
