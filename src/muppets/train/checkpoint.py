"""Training checkpoints: safetensors + JSON, written atomically, checked on load.

Nothing here pickles or unpickles: tensors go to safetensors files, all
else to JSON. Layout of ``run_dir/checkpoints/``::

    step-00000100/
        model.safetensors      model.state_dict(); tied/shared tensors stored once
                               (safetensors.torch.save_model) and re-tied on load
        optimizer.safetensors  every optimizer state tensor as ``state.{i}.{name}``
                               (``i`` = parameter index in group order, e.g. state.0.exp_avg)
        optimizer.json         param_groups hyper-parameters, non-tensor state, and the
                               parameter names of every group (checked on load)
        rng.safetensors        torch RNG states as uint8 tensors: ``torch.cpu`` (rank 0),
                               ``torch.cpu.rank{r}`` for every rank under DDP, ``torch.cuda.{d}``
        trainer_state.json     step, tokens_seen, elapsed_s, world_size, train_config,
                               run_config, numpy and python RNG states
    latest                     text file: the name of the newest complete checkpoint

A checkpoint is written into ``.tmp-step-…`` and renamed into place, and ``latest`` is
replaced atomically afterwards, so a crash at any moment leaves the previous checkpoint intact.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import random
import re
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

from muppets.config import atomic_dir, atomic_path, remove_stale, write_json_atomic
from muppets.errors import CheckpointError, CheckpointMismatch, ConfigError
from muppets.train.optim import param_groups

logger = logging.getLogger(__name__)

FORMAT = "muppets.checkpoint"
VERSION = 1
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
OPTIMIZER_JSON = "optimizer.json"
RNG_FILE = "rng.safetensors"
STATE_FILE = "trainer_state.json"
CHECKPOINT_FILES = (MODEL_FILE, OPTIMIZER_FILE, OPTIMIZER_JSON, RNG_FILE, STATE_FILE)
LATEST = "latest"
_STEP_DIR = re.compile(r"^step-(\d+)$")
# The type of every ``keep_checkpoints`` setting: how many checkpoints a run keeps, newest first.
KeepCheckpoints = Union[int, Literal["all"]]


def checkpoints_kept(value: Any, key: str = "keep_checkpoints") -> int:
    """``keep_checkpoints`` as :func:`save_checkpoint`'s ``keep``: ``N`` >= 1 keeps the newest N
    (1, the default of every run: the last one, which resumes it; a fine-tuning run's best model
    is its ``best/`` directory, never a checkpoint), ``"all"`` (or 0, as before) keeps every one (0).

    >>> checkpoints_kept(1), checkpoints_kept("all"), checkpoints_kept(0)
    (1, 0, 0)
    """
    if value == "all":
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{key}: invalid value {value!r}; expected a number of checkpoints (1 = the last) or 'all'",
                          key=key)
    return value


@dataclass
class TrainerState:
    """Everything but tensors that a resume needs (stored in ``trainer_state.json``)."""

    step: int  # optimizer updates done
    tokens_seen: int = 0  # tokens consumed over all ranks
    elapsed_s: float = 0.0  # training wall time so far, over all resumes
    world_size: int = 1  # processes of the run that wrote the checkpoint
    train_config: dict[str, Any] = field(default_factory=dict)  # the TrainConfig as a dict
    run_config: dict[str, Any] = field(default_factory=dict)  # the resolved full run config


@dataclass
class RngState:
    """Random generator states: torch ones as tensors, numpy and python ones as JSON lists."""

    torch: dict[str, torch.Tensor]  # "torch.cpu", "torch.cpu.rank{r}", "torch.cuda.{d}"
    numpy: list[Any]
    python: list[Any]


def checkpoint_name(step: int) -> str:
    """``step-00000100`` for step 100."""
    return f"step-{step:08d}"


# ---------------------------------------------------------------------------------- RNG


def capture_rng() -> RngState:
    """This process's torch (CPU and CUDA), numpy and python ``random`` states."""
    states = {"torch.cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for device, state in enumerate(torch.cuda.get_rng_state_all()):
            states[f"torch.cuda.{device}"] = state
    name, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    numpy_state = [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]
    return RngState(torch=states, numpy=numpy_state, python=[version, list(internal), gauss_next])


def restore_rng(state: RngState, rank: int = 0) -> None:
    """Set every generator from ``state``; under DDP ``rank`` picks its own torch CPU state."""
    own = state.torch.get(f"torch.cpu.rank{rank}", state.torch["torch.cpu"])
    torch.set_rng_state(own)
    cuda = [state.torch[k] for k in sorted(state.torch) if k.startswith("torch.cuda.")]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    name, keys, pos, has_gauss, cached = state.numpy
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    version, internal, gauss_next = state.python
    random.setstate((version, tuple(internal), gauss_next))


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Run a block without disturbing any random generator (e.g. evaluation during training)."""
    state = capture_rng()
    try:
        yield
    finally:
        restore_rng(state)


# ------------------------------------------------------------------------------ writing


def _optimizer_payload(
    optimizer: torch.optim.Optimizer, param_names: list[list[str]]
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split ``optimizer.state_dict()`` into flat tensors and a JSON-able remainder."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    other: dict[str, dict[str, Any]] = {}
    for index, entries in sd["state"].items():
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{index}.{key}"] = value.detach().cpu().contiguous()
            else:
                other.setdefault(str(index), {})[key] = value
    groups = [
        {k: (list(v) if isinstance(v, tuple) else v) for k, v in group.items()}
        for group in sd["param_groups"]
    ]
    return tensors, {"param_groups": groups, "state": other, "param_names": param_names}


def _write_files(
    directory: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    param_names: list[list[str]],
    state: TrainerState,
    rng: RngState,
) -> None:
    meta = {"format": FORMAT, "version": str(VERSION)}
    save_model(model, str(directory / MODEL_FILE), metadata=dict(meta))
    tensors, opt_json = _optimizer_payload(optimizer, param_names)
    save_file(tensors, str(directory / OPTIMIZER_FILE), metadata=dict(meta))
    write_json_atomic(directory / OPTIMIZER_JSON, opt_json)
    save_file({k: v.contiguous() for k, v in rng.torch.items()}, str(directory / RNG_FILE), metadata=meta)
    payload = {"format": FORMAT, "version": VERSION, **asdict(state)}
    payload["rng"] = {"numpy": rng.numpy, "python": rng.python}
    write_json_atomic(directory / STATE_FILE, payload)


def write_latest(root: Path, name: str) -> None:
    """Point ``root/latest`` at checkpoint ``name`` (atomic replace)."""
    with atomic_path(root / LATEST) as tmp:
        tmp.write_text(name + "\n", encoding="utf-8")


def remove_killed_saves(root: Path, prefix: str) -> None:
    """Remove what killed saves of any checkpoint ``<prefix>…`` under ``root`` left on this host
    (:func:`atomic_dir` clears only the leftovers of the name it writes; ``latest``'s are
    :func:`atomic_path`'s): half-written temporaries, and a checkpoint moved aside by a save
    killed between its renames unless it is the only copy of that step."""
    remove_stale(root, f".tmp-{glob.escape(prefix)}*")
    remove_stale(root, f".old-{glob.escape(prefix)}*",
                 keep=lambda old: not (root / old.name[len(".old-"):].rpartition("-")[0]).is_dir())


def save_checkpoint(
    root: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    param_names: list[list[str]],
    state: TrainerState,
    rng: RngState,
    keep: int = 3,
) -> Path:
    """Write ``root/step-XXXXXXXX`` atomically, update ``latest``, keep the newest ``keep``.

    Args:
        root: the checkpoints directory (``run_dir/checkpoints``).
        model: the bare module (not a DDP wrapper).
        param_names: per optimizer group, the parameter names (from :func:`param_groups`).
        keep: how many checkpoints to keep, newest by step; ``<= 0`` keeps all.

    Returns:
        The directory of the new checkpoint.
    """
    root.mkdir(parents=True, exist_ok=True)
    remove_killed_saves(root, "step-")
    name = checkpoint_name(state.step)
    with atomic_dir(root / name) as tmp:
        _write_files(tmp, model, optimizer, param_names, state, rng)
    write_latest(root, name)
    prune_checkpoints(root, keep, protect=root / name)
    return root / name


def list_checkpoints(root: Path) -> list[Path]:
    """Complete ``step-*`` directories under ``root``, oldest step first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name))]
    return [p for _, p in sorted(found) if p.is_dir() and not missing_files(p)]


def prune_checkpoints(root: Path, keep: int, protect: Path | None = None) -> None:
    """Delete all but the newest ``keep`` checkpoints (never ``protect``); ``keep <= 0`` keeps all."""
    if keep <= 0:
        return
    for path in list_checkpoints(root)[:-keep]:
        if path != protect:
            logger.debug("removing old checkpoint %s", path)
            shutil.rmtree(path, ignore_errors=True)


# ------------------------------------------------------------------------------ reading


def missing_files(path: Path) -> list[str]:
    """Names of the checkpoint files absent from ``path``."""
    return [name for name in CHECKPOINT_FILES if not (path / name).is_file()]


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint ``run_dir/checkpoints/latest`` names, else the newest complete one, else None."""
    root = Path(run_dir) / "checkpoints"
    pointer = root / LATEST
    if pointer.is_file():
        target = root / pointer.read_text(encoding="utf-8").strip()
        if target.is_dir() and not missing_files(target):
            return target
        logger.warning("%s names %s, which is missing or incomplete; using the newest complete one", pointer, target)
    found = list_checkpoints(root)
    return found[-1] if found else None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: unreadable checkpoint file ({err})") from err


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except (OSError, SafetensorError) as err:
        raise CheckpointError(f"{path}: unreadable safetensors file ({err})") from err


def load_model_weights(path: Path, model: nn.Module) -> None:
    """Load ``path/model.safetensors`` into ``model`` strictly, restoring tied tensors.

    Raises:
        CheckpointError: the file is missing or unreadable, or a key is missing, unexpected or
            of the wrong shape; the message names the directory and the key.
    """
    file = Path(path) / MODEL_FILE
    if not file.is_file():
        raise CheckpointError(f"{path}: checkpoint has no {MODEL_FILE}")
    try:
        missing, unexpected = load_model(model, str(file), strict=False)
    except (OSError, SafetensorError) as err:
        raise CheckpointError(f"{file}: unreadable safetensors file ({err})") from err
    except RuntimeError as err:  # shape mismatch from load_state_dict: one line per tensor
        sizes = [line.strip() for line in str(err).splitlines() if line.strip().startswith("size mismatch")]
        detail = (f"{sizes[0]} ({len(sizes)} tensor{'s differ' if len(sizes) > 1 else ' differs'})" if sizes
                  else str(err))
        raise CheckpointMismatch(f"{file}: does not fit {type(model).__name__}: {detail}") from err
    if missing:
        raise CheckpointMismatch(f"{file}: missing key {sorted(missing)[0]!r} ({len(missing)} missing)")
    if unexpected:
        raise CheckpointMismatch(f"{file}: unexpected key {sorted(unexpected)[0]!r} ({len(unexpected)} unexpected)")


def _check_param_names(path: Path, saved: list[list[str]], current: list[list[str]]) -> None:
    if len(saved) != len(current):
        raise CheckpointMismatch(f"{path}: {len(saved)} optimizer groups saved, the model has {len(current)}")
    for group, (old, new) in enumerate(zip(saved, current)):
        for index in range(max(len(old), len(new))):
            a = old[index] if index < len(old) else None
            b = new[index] if index < len(new) else None
            if a != b:
                raise CheckpointMismatch(
                    f"{path / OPTIMIZER_JSON}: optimizer group {group} parameter {index} is {a!r} "
                    f"in the checkpoint but {b!r} in the model"
                )


def _optimizer_state_dict(tensors: dict[str, torch.Tensor], meta: dict[str, Any], current: list[dict]) -> dict:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    for index, entries in meta["state"].items():
        state.setdefault(int(index), {}).update(entries)
    groups = []
    for saved, live in zip(meta["param_groups"], current):
        groups.append({k: (tuple(v) if isinstance(live.get(k), tuple) else v) for k, v in saved.items()})
    return {"state": state, "param_groups": groups}


def load_optimizer(path: Path, optimizer: torch.optim.Optimizer, param_names: list[list[str]]) -> None:
    """Restore ``optimizer`` from ``path``, checking that the parameter names match ``param_names``."""
    path = Path(path)
    meta = _read_json(path / OPTIMIZER_JSON)
    for key in ("param_groups", "state", "param_names"):
        if key not in meta:
            raise CheckpointError(f"{path / OPTIMIZER_JSON}: missing key {key!r}")
    _check_param_names(path, meta["param_names"], param_names)
    tensors = _read_tensors(path / OPTIMIZER_FILE)
    state_dict = _optimizer_state_dict(tensors, meta, optimizer.state_dict()["param_groups"])
    try:
        optimizer.load_state_dict(state_dict)
    except (ValueError, KeyError, RuntimeError) as err:
        raise CheckpointMismatch(f"{path}: optimizer state does not fit: {err}") from err


def read_state(path: Path) -> TrainerState:
    """The counters and the recorded settings of the checkpoint at ``path`` (no tensors read)."""
    return _load_state(Path(path))[0]


def _load_state(path: Path) -> tuple[TrainerState, dict[str, Any]]:
    data = _read_json(path / STATE_FILE)
    if data.get("format") != FORMAT:
        raise CheckpointError(f"{path / STATE_FILE}: format is {data.get('format')!r}, expected {FORMAT!r}")
    for key in ("step", "rng"):
        if key not in data:
            raise CheckpointError(f"{path / STATE_FILE}: missing key {key!r}")
    names = TrainerState.__dataclass_fields__
    return TrainerState(**{k: v for k, v in data.items() if k in names}), data["rng"]


def _load_rng(path: Path, rng_json: dict[str, Any]) -> RngState:
    tensors = _read_tensors(path / RNG_FILE)
    for key, where in (("torch.cpu", RNG_FILE), ("numpy", STATE_FILE), ("python", STATE_FILE)):
        if key not in tensors and key not in rng_json:
            raise CheckpointError(f"{path / where}: missing RNG state {key!r}")
    return RngState(torch=tensors, numpy=rng_json["numpy"], python=rng_json["python"])


def load_checkpoint(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    param_names: list[list[str]] | None = None,
) -> tuple[TrainerState, RngState]:
    """Load a checkpoint directory into ``model`` (and ``optimizer``); return state and RNG.

    ``param_names`` (per optimizer group) default to those of :func:`param_groups` on ``model``.

    Raises:
        CheckpointError: a file is missing or unreadable, or a key is missing or does not fit;
            the message names the directory and the file or key.
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: checkpoint directory does not exist")
    missing = missing_files(path)
    if missing:
        raise CheckpointError(f"{path}: incomplete checkpoint, missing {', '.join(missing)}")
    state, rng_json = _load_state(path)
    rng = _load_rng(path, rng_json)
    load_model_weights(path, model)
    if optimizer is not None:
        names = param_names if param_names is not None else param_groups(model, 0.0)[1]
        load_optimizer(path, optimizer, names)
    return state, rng
