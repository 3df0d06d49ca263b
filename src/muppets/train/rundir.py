"""What a training command may do with a run directory that already holds files.

A directory the user named is never overwritten by surprise:

- **A fresh start** (no checkpoint to resume, or ``--fresh``) writes ``config.json`` and
  ``log.jsonl``, so it is refused (:class:`~muppets.errors.RunDirError`) where that would destroy
  something: the checkpoints of an earlier run (only ``--fresh`` gets there with them), or a
  ``config.json`` / ``log.jsonl`` that a run of this kind did not write (a user's own files, or a
  run of another command). A run of the same kind stopped before its first checkpoint starts
  again, as it always did.
- **A resume with other settings** keeps the record of the old ones: the previous
  ``config.json`` is kept as ``config.step-<N>.json`` before the new one is written, and resuming
  a *finished* run with other settings (the whole run config and the derived training settings)
  is refused: nothing would be trained, and the run's ``config.json`` and metrics would name
  settings its model was not trained with. Settings that only change how a run is watched, paced
  or placed (:data:`PACING_KEYS`) may always change.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

from muppets.errors import RunDirError

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
LOG_FILE = "log.jsonl"
# settings (the last part of a dotted key) that change neither the batches, the updates nor the
# scores of a run: how it is watched, paced and placed
PACING_KEYS = frozenset({"threads", "progress", "plot", "tensorboard", "log_every", "trim_heap_seconds",
                         "max_minutes", "eval_every", "checkpoint_every", "keep_checkpoints", "run_dir",
                         "device", "eval_batch_size"})


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
    and the caller's ``free`` keys (a dotted key or its last part) aside."""
    free = PACING_KEYS | frozenset(free)
    return {k: v for k, v in changed.items() if k.rpartition(".")[2] not in free and k not in free}


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
    try:
        old = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if old == json.loads(json.dumps(run_config)):
        return None
    kept = config.with_name(f"config.step-{step:08d}.json")
    if not kept.exists():
        shutil.copyfile(config, kept)
        logger.info("the settings of steps 1-%d differ from this command's: kept as %s", step, kept)
    return kept
