"""Dropout with a cheaper random mask on CPU.

``torch.nn.functional.dropout`` draws one 32-bit random number per element from the
(sequential) CPU generator; on a 2-core machine that is a tenth of a BERT-mini step. Here one
64-bit draw yields four 16-bit uniforms, compared against ``round(p * 2**16)``: the keep
probability is exact to 1/65536 and the stream still comes from the seeded global generator,
so runs stay reproducible. On GPU the stock dropout is used.

:func:`suppressed` turns dropout off for the calling thread only, whatever the modules' training
flag: ``generate()`` decodes a model that another thread may be training without switching its
mode under that thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch
import torch.nn.functional as F

_I64 = (-(2**63), 2**63 - 1)
_LOCAL = threading.local()  # .off: dropout suppressed on this thread


@contextlib.contextmanager
def suppressed() -> Iterator[None]:
    """No dropout on this thread within the block (other threads are not affected)."""
    previous = getattr(_LOCAL, "off", False)
    _LOCAL.off = True
    try:
        yield
    finally:
        _LOCAL.off = previous


def is_suppressed() -> bool:
    """True inside :func:`suppressed` on this thread."""
    return getattr(_LOCAL, "off", False)


def _uniform16(shape: torch.Size, device: torch.device) -> torch.Tensor:
    """int16 values uniform on [-32768, 32767]: four per 64-bit draw of the global generator."""
    n = 1
    for s in shape:
        n *= s
    bits = torch.randint(*_I64, ((n + 3) // 4,), dtype=torch.int64, device=device)
    return bits.view(torch.int16)[:n].view(shape)


def _threshold(p: float) -> int:
    return int(round(p * 65536)) - 32768


def dropout_mask(shape: torch.Size, p: float, device: torch.device) -> torch.Tensor:
    """Bool keep-mask of ``shape``: each element True with probability ``1 - p`` (to 2^-16)."""
    return _uniform16(shape, device) >= _threshold(p)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout: zero with probability ``p``, scale survivors by ``1 / (1 - p)``."""
    if not training or p == 0.0 or is_suppressed():
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, True)
    keep = _uniform16(x.shape, x.device) >= _threshold(p)
    scale = torch.tensor(1.0 / (1.0 - p), dtype=x.dtype)
    return x * torch.where(keep, scale, torch.zeros((), dtype=x.dtype))  # one mask pass, one multiply
