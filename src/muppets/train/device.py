"""Where a run computes, and how its batches get there.

:func:`pick_device` reads a run's ``device`` setting: ``auto`` is this rank's GPU
(``cuda:<LOCAL_RANK>`` under ``torchrun``) when CUDA is available, else the CPU; a plain ``cuda``
is this rank's GPU too, so that every rank of a multi-GPU run does not land on ``cuda:0``;
``cuda:N`` is GPU N. Asking for CUDA where there is none is a :class:`~muppets.errors.ConfigError`,
not a crash at the first ``.to()``.

:func:`to_device` moves a batch built on the host: to a GPU through pinned (page-locked) memory
with ``non_blocking=True``, so the copy overlaps the work already queued instead of stalling
the host; on the CPU it leaves the tensors as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from muppets.errors import ConfigError


def pick_device(name: str, local_rank: int = 0) -> torch.device:
    """``auto`` | ``cpu`` | ``cuda`` | ``cuda:N`` (any other torch device name passes through).

    Raises:
        ConfigError: CUDA asked for but not available, or ``cuda:N`` beyond the GPUs there are.
    """
    if name == "auto":
        return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise ConfigError(f"device={name!r} is not a device name: auto, cpu, cuda or cuda:N") from e
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        raise ConfigError(f"device={name!r} but CUDA is not available here (torch {torch.__version__}, "
                          f"built with CUDA {torch.version.cuda}); use device=cpu or device=auto")
    index = local_rank if device.index is None else device.index
    if index >= torch.cuda.device_count():
        raise ConfigError(f"device={name!r}: GPU {index} asked for, {torch.cuda.device_count()} visible")
    return torch.device("cuda", index)


def to_device(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """``batch``'s tensors on ``device`` (other values as they are): pinned and copied without
    blocking when ``device`` is a GPU and a tensor is on the CPU; unchanged on the CPU."""
    return {k: move(v, device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def move(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """One tensor onto ``device``; host -> GPU through pinned memory, without blocking."""
    if tensor.device == device:
        return tensor
    if device.type == "cuda" and tensor.device.type == "cpu":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)
