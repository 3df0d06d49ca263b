"""Reading and writing weight files: safetensors only — nothing is ever unpickled."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from muppets.config import atomic_path, parse_json, read_utf8
from muppets.errors import CheckpointError, DataError

PICKLED = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "model.ckpt.index")



def read_json_object(path: Path) -> dict:
    """A model directory's JSON file (``config.json``, a safetensors index) as a dict, or a
    :class:`CheckpointError` naming the file: unreadable, not UTF-8, not JSON (nesting bombs and
    huge numbers included: :func:`muppets.config.parse_json`), or not an object."""
    try:
        data = parse_json(read_utf8(path, "JSON file"), path)  # a byte-order mark is dropped
    except DataError as err:  # unreadable, not UTF-8 (file:line, byte), or not JSON
        raise CheckpointError(str(err)) from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    return data

def read_weights(directory: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of ``model.safetensors`` (or its sharded index) in ``directory``."""
    out: dict[str, torch.Tensor] = {}
    for path in weight_files(directory):
        out.update(_load(path))
    return out


def read_shapes(directory: str | Path) -> dict[str, tuple[tuple[int, ...], Path]]:
    """Name -> (shape, file) of every tensor of ``model.safetensors`` (or its shards), read from
    the files' headers only: no tensor is loaded, so sizes can be checked before allocating."""
    out: dict[str, tuple[tuple[int, ...], Path]] = {}
    for path in weight_files(directory):
        try:
            with safe_open(str(path), framework="pt") as fh:
                out.update({k: (tuple(fh.get_slice(k).get_shape()), path) for k in fh.keys()})
        except (OSError, ValueError, RuntimeError, SafetensorError) as err:
            raise CheckpointError(f"{path}: cannot read safetensors header: {err}") from err
    return out


def weight_files(directory: str | Path) -> list[Path]:
    """The safetensors file(s) of ``directory``: ``model.safetensors`` or the shards its index
    names; a typed error when there are none (or only pickled weights)."""
    directory = Path(directory)
    single, index = directory / "model.safetensors", directory / "model.safetensors.index.json"
    if single.is_file():
        return [single]
    if index.is_file():
        try:
            shards = sorted(set(read_json_object(index)["weight_map"].values()))
        except (KeyError, TypeError, AttributeError) as err:
            raise CheckpointError(f"{index}: not a safetensors index ({err!r})") from err
        return [directory / shard for shard in shards]
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
    meta = read_json_object(path)
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
    except (OSError, ValueError, RuntimeError, SafetensorError) as err:  # SafetensorError: a corrupt file
        raise CheckpointError(f"{path}: cannot read safetensors file: {err}") from err


def write_weights(tensors: dict[str, torch.Tensor], path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` to ``path`` atomically (temporary file + rename)."""
    with atomic_path(path) as tmp:
        save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(tmp), metadata=metadata)
