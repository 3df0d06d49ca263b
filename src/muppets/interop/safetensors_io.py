"""Reading and writing weight files: safetensors only — nothing is ever unpickled."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from muppets.errors import CheckpointError

PICKLED = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "model.ckpt.index")


def read_weights(directory: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of ``model.safetensors`` (or its sharded index) in ``directory``."""
    directory = Path(directory)
    single, index = directory / "model.safetensors", directory / "model.safetensors.index.json"
    if single.is_file():
        return _load(single)
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        out: dict[str, torch.Tensor] = {}
        for shard in shards:
            out.update(_load(directory / shard))
        return out
    pickled = [p for p in PICKLED if (directory / p).exists()]
    if pickled:
        raise CheckpointError(
            f"{directory}: only {pickled[0]} found; muppets never unpickles weights. Convert it to "
            "safetensors once (e.g. transformers' save_pretrained(..., safe_serialization=True))."
        )
    raise CheckpointError(f"{directory}: no model.safetensors found")


def read_model_dir(directory: str | Path, fmt: str, what: str,
                   build: Callable[[dict], torch.nn.Module]) -> tuple[torch.nn.Module, dict]:
    """One of our model directories: ``config.json`` whose ``"format"`` is ``fmt``, the model
    ``build(config)`` makes, and ``model.safetensors`` loaded into it strictly. Returns the
    model in eval mode and the config; ``what`` names the kind in errors (``"an ELMo model"``)."""
    directory = Path(directory)
    path = directory / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{directory}: no config.json (not {what} directory)")
    meta = json.loads(path.read_text(encoding="utf-8"))
    if meta.get("format") != fmt:
        raise CheckpointError(f"{path}: format {meta.get('format')!r} is not {fmt!r}")
    model = build(meta)
    try:
        model.load_state_dict(read_weights(directory), strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"{directory / 'model.safetensors'}: does not fit its config.json: {err}") from err
    return model.eval(), meta


def read_file(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of one safetensors file (a typed error names it when unreadable)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such safetensors file")
    return _load(path)


def _load(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except (OSError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{path}: cannot read safetensors file: {err}") from err


def write_weights(tensors: dict[str, torch.Tensor], path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` to ``path`` atomically (temporary file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        save_file({k: v.detach().contiguous() for k, v in tensors.items()}, tmp, metadata=metadata)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
