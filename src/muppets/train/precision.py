"""Mixed precision for training: ``fp32`` | ``bf16`` | ``auto``.

``bf16`` runs the forward pass under ``torch.autocast`` with bfloat16 matmuls while the weights,
the optimizer state and the output softmax (see :mod:`muppets.nn.linear_ce`) stay in fp32. A
CPU with native bf16 dot products (AVX512-BF16 or AMX) runs bf16 matmuls faster than fp32
(``benchmarks/pretrain_speed.py --bf16`` measures a whole training step); on a CPU without
them bf16 is emulated and slower, which is why ``auto`` picks it only where the hardware has it.
"""

from __future__ import annotations

import functools
import logging
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch

from muppets.errors import ConfigError

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "bf16", "auto")
_WARNED: set[str] = set()  # the settings already warned about in this process


@functools.cache
def cpu_has_native_bf16() -> bool:
    """True when /proc/cpuinfo lists ``avx512_bf16`` or ``amx_bf16`` (Linux); False elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "").split()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_precision(name: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``name`` on ``device`` (None = plain fp32)."""
    if name not in PRECISIONS:
        raise ConfigError(f"precision must be one of {PRECISIONS}, got {name!r}")
    if name == "fp32":
        return None
    if name == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
        return torch.bfloat16 if device.type == "cpu" and cpu_has_native_bf16() else None
    if device.type == "cpu":
        warn_if_emulated("precision")
    return torch.bfloat16


def warn_if_emulated(setting: str) -> None:
    """Warn (once per ``setting`` and process) that bf16 asked for on this CPU is emulated:
    it runs, slower than fp32, which a recipe written for a bf16 CPU would not say by itself."""
    if cpu_has_native_bf16() or setting in _WARNED:
        return
    _WARNED.add(setting)
    log.warning("%s=bf16 on a CPU without native bf16 (no avx512_bf16 or amx_bf16 in /proc/cpuinfo): bf16 is "
                "emulated and slower than fp32 here; precision=auto uses bf16 only where the CPU has it", setting)


def autocast(device: torch.device, dtype: torch.dtype | None) -> AbstractContextManager:
    """``torch.autocast`` for ``dtype``, or a no-op for fp32."""
    return nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)
