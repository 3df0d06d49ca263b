"""The kinds of sentence-level module, registered in one table, read from and written to
sentence-transformers' layout.

A sentence-transformers directory lists its modules in ``modules.json``, in the order they run::

    [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
     {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}, …]

A :class:`ModuleKind` is found by the last dotted part of ``type`` (the class name: releases
before 3.0 write ``sentence_transformers.models.Pooling``, later ones the full module path), and
reads its folder into a torch module (``Transformer`` is the backbone itself: none). A torch
module writes its folder back with ``save(folder)``. A new kind registers here and nowhere else;
a kind muppets does not know is refused by name, never skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from muppets.errors import CheckpointError
from muppets.interop.safetensors_io import read_file, write_weights
from muppets.sentence.pooling import LEGACY_KEYS, ST_NAMES, pool

ST_PREFIX = "sentence_transformers.models."  # what we write: every release of sentence-transformers reads it


def read_json(path: Path, default=None):
    """A JSON file's value, ``default`` when it does not exist; unreadable -> CheckpointError."""
    if not path.is_file():
        return default
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: not readable JSON: {err}") from err


def write_json(path: Path, data: dict | list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------- the torch modules


class Pooling(nn.Module):
    """Token vectors ``(B, T, H)`` -> sentence vector ``(B, len(modes) * H)`` (:mod:`.pooling`)."""

    kind = "Pooling"

    def __init__(self, modes: Sequence[str], dim: int) -> None:
        super().__init__()
        self.modes, self.dim = tuple(modes), int(dim)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return pool(hidden, mask, self.modes)

    @property
    def out_features(self) -> int:
        return len(self.modes) * self.dim

    def save(self, folder: Path) -> None:
        settings = {"word_embedding_dimension": self.dim,
                    **{key: mode in self.modes for key, mode in LEGACY_KEYS.items()}, "include_prompt": True}
        write_json(folder / "config.json", settings)


ACTIVATIONS = {cls.__name__: cls for cls in (nn.Tanh, nn.Identity, nn.ReLU, nn.GELU, nn.Sigmoid, nn.SiLU)}


def activation_name(act: nn.Module) -> str:
    """The name sentence-transformers writes (``torch.nn.modules.activation.Tanh``)."""
    return f"{type(act).__module__}.{type(act).__qualname__}"


class Dense(nn.Module):
    """``act(W x + b)``: ``(B, in_features)`` -> ``(B, out_features)``."""

    kind = "Dense"

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 activation: nn.Module | None = None) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.activation = nn.Tanh() if activation is None else activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.linear(x))

    @property
    def out_features(self) -> int:
        return self.linear.out_features

    def save(self, folder: Path) -> None:
        write_json(folder / "config.json", {
            "in_features": self.linear.in_features, "out_features": self.linear.out_features,
            "bias": self.linear.bias is not None, "activation_function": activation_name(self.activation)})
        write_weights({f"linear.{k}": v.detach().contiguous() for k, v in self.linear.state_dict().items()},
                      folder / "model.safetensors")


class Normalize(nn.Module):
    """Unit L2 length: ``(B, D)`` -> ``(B, D)``."""

    kind = "Normalize"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(x, p=2, dim=-1)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)


# ----------------------------------------------------------------------------- readers


def read_pooling(folder: Path) -> Pooling:
    """``1_Pooling/config.json``: ``pooling_mode`` (a name or a list, sentence-transformers >= 5)
    or the legacy ``pooling_mode_*`` flags; no mode at all = mean, as sentence-transformers does."""
    path = folder / "config.json"
    settings = read_json(path, {})
    names = {st: ours for ours, st in ST_NAMES.items()}
    if "pooling_mode" in settings:
        given = settings["pooling_mode"]
        given = [given] if isinstance(given, str) else list(given or [])
        unknown = [m for m in given if m not in names]
        if unknown:
            raise CheckpointError(f"{path}: key 'pooling_mode' has {unknown}, not a pooling muppets runs "
                                  f"(one of: {', '.join(names)})")
        modes = [names[m] for m in given]
    else:
        modes = [mode for key, mode in LEGACY_KEYS.items() if settings.get(key)]
    dim = settings.get("embedding_dimension", settings.get("word_embedding_dimension", 0))
    return Pooling(modes or ["mean"], int(dim or 0))


def read_activation(path: Path, value) -> nn.Module:
    """``activation_function`` (``torch.nn.modules.activation.Tanh`` …) as a module, or one
    CheckpointError naming the file, the key and what muppets runs."""
    name = str(value).rsplit(".", 1)[-1]
    if not str(value).startswith("torch.nn.") or name not in ACTIVATIONS:
        known = ", ".join(f"torch.nn.{n}" for n in ACTIVATIONS)
        raise CheckpointError(f"{path}: key 'activation_function' is {value!r}, not an activation muppets runs "
                              f"(one of: {known})")
    return ACTIVATIONS[name]()


def read_dense(folder: Path) -> Dense:
    """``2_Dense/config.json`` + ``model.safetensors`` (``linear.weight (out, in)``, ``linear.bias``)."""
    path = folder / "config.json"
    settings = read_json(path)
    if not isinstance(settings, dict):
        raise CheckpointError(f"{path}: missing (a Dense module needs its config.json)")
    for key, wanted in (("use_residual", False), ("module_input_name", "sentence_embedding"),
                        ("module_output_name", "sentence_embedding")):
        if settings.get(key, wanted) != wanted:
            raise CheckpointError(f"{path}: key {key!r} is {settings[key]!r}; muppets runs Dense modules "
                                  f"with {key}={wanted!r} only")
    act = read_activation(path, settings.get("activation_function", "torch.nn.modules.activation.Tanh"))
    dense = Dense(int(settings["in_features"]), int(settings["out_features"]), bool(settings.get("bias", True)), act)
    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise CheckpointError(f"{folder}: no model.safetensors (muppets never unpickles pytorch_model.bin; "
                              "convert it with safetensors' torch.save_file)")
    tensors = {k.removeprefix("linear."): v for k, v in read_file(weights).items()}
    try:
        dense.linear.load_state_dict(tensors)
    except RuntimeError as err:
        raise CheckpointError(f"{weights}: does not fit {path} ({err})") from err
    return dense


# ----------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class ModuleKind:
    """One kind of sentence-transformers module: the class name in ``modules.json``'s ``type``
    and how its folder is read (None for ``Transformer``: the backbone, read by its family)."""

    name: str
    read: Callable[[Path], nn.Module] | None


_KINDS: dict[str, ModuleKind] = {}


def register(kind: ModuleKind) -> ModuleKind:
    if kind.name in _KINDS:
        raise ValueError(f"sentence module kind {kind.name!r} registered twice")
    _KINDS[kind.name] = kind
    return kind


def kind_of(type_name: object, source: Path, index: int) -> ModuleKind:
    """The kind of ``modules.json`` entry ``index`` (its ``type``), or a CheckpointError naming it."""
    name = str(type_name).rsplit(".", 1)[-1]
    if name not in _KINDS:
        raise CheckpointError(f"{source}: module {index} has 'type' {type_name!r}, a module muppets cannot run "
                              f"(it runs: {', '.join(_KINDS)}); refused rather than skipped")
    return _KINDS[name]


def kinds() -> tuple[str, ...]:
    return tuple(_KINDS)


register(ModuleKind("Transformer", None))
register(ModuleKind("Pooling", read_pooling))
register(ModuleKind("Dense", read_dense))
register(ModuleKind("Normalize", lambda folder: Normalize()))
