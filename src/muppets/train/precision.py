"""Mixed precision for training: ``fp32`` | ``bf16`` | ``auto``.

``bf16`` runs the forward pass under ``torch.autocast`` with bfloat16 matmuls while the weights,
the optimizer state and the output softmax (see :mod:`muppets.nn.linear_ce`) stay in fp32. A
CPU with native bf16 dot products (AVX512-BF16 or AMX) runs bf16 matmuls faster than fp32
(``benchmarks/pretrain_speed.py --bf16`` measures a whole training step); on a CPU without
them bf16 is emulated and slower, which is why ``auto`` considers it only where the hardware has it.

**``auto`` on a CPU is a measured choice.** Where bf16 is native, how much faster it is varies
from run to run on the same machine (a Xeon with AMX gave 1.44x, 1.49x, 1.72x and 0.89x of fp32
for the same script, issue 54). One cause: oneDNN, which runs CPU bf16 products, compiles a
primitive for every new shape, and BERT's masked-token count changes every batch (now padded to
a few shapes: :func:`~muppets.nn.linear_ce.pad_rows_to_bucket`); another is the host itself,
on shared machines. So ``auto`` does not assume the gain. :class:`AutoPrecision` times forward and
backward passes of the run's first update in both precisions (one warm-up pass each, then
:data:`PROBE_PASSES` each, alternating; fewer when bf16 is :data:`CLEARLY_SLOWER` in every pass)
and keeps bf16 only when its median is at least :data:`MIN_GAIN` times faster; the probe applies
no update and leaves the gradients, buffers and random generators as they were, so a run whose
probe chose fp32 trains exactly as a run with ``precision=fp32``. While bf16 runs, a watch
compares the median time per token of its last :data:`WATCH_WINDOW` forward/backward passes with
the probe's: when bf16 has become more than :data:`DEGRADED` times slower, the probe runs again
(at most :data:`MAX_RECHECKS` times) and fp32 takes over if it is now faster (the weights are
fp32 throughout, so switching is safe). The choice and its reason go to the console and to
``log.jsonl`` (``{"step", "precision", "precision_reason", "bf16_speedup"}``). A resumed run
measures again: the choice is the machine's of the moment, and bf16 and fp32 numerics differ
anyway, so a run under ``auto`` is not bit-exact across a resume that changes the choice;
``fp32`` and ``bf16`` never probe. On a GPU ``auto`` is bf16 where it is supported, without a
probe.
"""

from __future__ import annotations

import functools
import logging
import statistics
import time
from collections.abc import Callable
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


def auto_probes(device: torch.device) -> bool:
    """True when ``precision=auto`` on ``device`` is decided by :class:`AutoPrecision`: a CPU with
    native bf16. (Without it bf16 is emulated and slower, and auto is fp32 without a probe.)"""
    return device.type == "cpu" and cpu_has_native_bf16()


PROBE_PASSES = 3  # timed forward/backward passes per precision, after one warm-up pass each
CLEARLY_SLOWER = 1.5  # the probe stops early when every bf16 pass so far took this much longer than every fp32 pass
MIN_GAIN = 1.05  # bf16 is kept only when its median pass is at least this much faster than fp32's
WATCH_WINDOW = 20  # bf16 passes whose median time per token the watch compares with the probe's
DEGRADED = 1.15  # re-probe when that median exceeds the bf16 probe's by this factor
MAX_RECHECKS = 3  # re-probes per train() call; after them the choice stays


def timed(run: Callable[[torch.dtype | None], object], dtype: torch.dtype | None) -> float:
    """Seconds of ``run(dtype)`` on the wall clock (CPU: the work is done when it returns)."""
    start = time.perf_counter()
    run(dtype)
    return time.perf_counter() - start


class AutoPrecision:
    """The measured ``precision=auto`` of one training run (see the module docstring).

    ``probe(run, tokens)`` times ``run(dtype)`` (one forward/backward pass of the same
    micro-batches, ``dtype`` None for fp32 or bf16) in both precisions and sets :attr:`dtype`;
    ``observe(seconds, tokens)`` feeds the watch one bf16 pass and returns True when a re-probe
    is due. ``timer(run, dtype) -> seconds`` is :func:`timed` unless a test injects another;
    ``agree(seconds) -> seconds`` makes every rank decide on the same numbers (the trainer
    passes the mean over ranks).
    """

    def __init__(self, timer: Callable[..., float] = timed,
                 agree: Callable[[list[float]], list[float]] = lambda values: values) -> None:
        self.timer, self.agree = timer, agree
        self.dtype: torch.dtype | None = None
        self.speedup = float("nan")  # fp32 median / bf16 median of the last probe
        self.reason = ""
        self.rechecks = 0
        self.trigger = ""  # why the last re-probe was due
        self._bf16_per_token = float("nan")  # the last probe's bf16 seconds per token
        self._window: list[float] = []

    def probe(self, run: Callable[[torch.dtype | None], object], tokens: int) -> torch.dtype | None:
        """Time ``run`` in fp32 and bf16 (warm-up, then :data:`PROBE_PASSES` each, alternating
        which goes first) and choose; returns the chosen dtype (None = fp32)."""
        for dtype in (None, torch.bfloat16):  # first passes build kernels/primitives: not timed
            self.timer(run, dtype)
        times: dict[torch.dtype | None, list[float]] = {None: [], torch.bfloat16: []}
        for i in range(PROBE_PASSES):
            for dtype in ((None, torch.bfloat16) if i % 2 == 0 else (torch.bfloat16, None)):
                times[dtype].append(self.timer(run, dtype))
            agreed = self.agree(times[None] + times[torch.bfloat16])
            if min(agreed[i + 1:]) > CLEARLY_SLOWER * max(agreed[:i + 1]):
                break  # bf16 lost every pass by far (emulated bf16 can be 20x slower): no more of them
        n = len(agreed) // 2
        fp32, bf16 = statistics.median(agreed[:n]), statistics.median(agreed[n:])
        self.speedup = fp32 / max(bf16, 1e-12)
        self._bf16_per_token = bf16 / max(tokens, 1)
        self._window.clear()
        how = (f"median of {n} forward/backward pass{'es' if n > 1 else ''} each, "
               f"{fp32 * 1e3:.1f} ms fp32 vs {bf16 * 1e3:.1f} ms bf16")
        if self.speedup >= MIN_GAIN:
            self.dtype = torch.bfloat16
            self.reason = f"bf16 was {self.speedup:.2f}x fp32 ({how})"
        else:
            self.dtype = None
            self.reason = f"bf16 was {self.speedup:.2f}x fp32, under the {MIN_GAIN:.2f}x it must gain ({how})"
        return self.dtype

    def observe(self, seconds: float, tokens: int) -> bool:
        """Record one bf16 forward/backward pass of ``tokens`` tokens; True when the median time
        per token of the last :data:`WATCH_WINDOW` passes exceeds the probe's by :data:`DEGRADED`
        and a re-probe is still allowed (the caller then calls :meth:`probe` again)."""
        if self.dtype is None or self.rechecks >= MAX_RECHECKS:
            return False
        self._window.append(seconds / max(tokens, 1))
        del self._window[:-WATCH_WINDOW]
        if len(self._window) < WATCH_WINDOW:
            return False
        slowed = statistics.median(self._window[-WATCH_WINDOW:]) / self._bf16_per_token
        if slowed <= DEGRADED:
            return False
        self.rechecks += 1
        self._window.clear()
        self.trigger = f"bf16 took {slowed:.2f}x its probe's time per token over the last {WATCH_WINDOW} steps"
        return True


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
