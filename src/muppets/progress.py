"""Progress of long work: a bar on a terminal, a log line now and then anywhere else.

A tqdm bar redraws itself with carriage returns. On a terminal that is one line that moves; in
a log file (stderr redirected, a batch job, CI) it is a heap of ``\\r``-joined fragments.
:func:`progress_bar` is the one place that decides: a bar when its stream is a terminal (or a
Jupyter widget), otherwise a line through :mod:`logging` every ``log_every_s`` seconds (none for
work that ends sooner; none at all with ``log_every_s=0``, for callers that log their own
progress)::

    for batch in progress_bar(batches, desc="embed", unit="batch"):
        ...
    # terminal:  embed:  40%|████      | 120/300 [01:10<01:45,  1.71batch/s]
    # log file:  INFO muppets.progress: embed:  40% 120/300 [01:10<01:45,  1.71batch/s]

What it returns is a tqdm object either way (``update``, ``set_postfix_str``, ``close``, a
context manager, an iterable), so callers never test which one they got.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from tqdm.auto import tqdm
from tqdm.autonotebook import tqdm as auto_tqdm
from tqdm.std import tqdm as text_tqdm

logger = logging.getLogger(__name__)

LOG_EVERY_S = 30.0  # seconds between two log lines of work that is not on a terminal
_LINE = "{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
_LINE_NO_TOTAL = "{desc}: {n_fmt} [{elapsed}, {rate_fmt}{postfix}]"


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (a closed or odd stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def progress_bar(iterable: Iterable | None = None, *, total: float | None = None, desc: str = "",
                 unit: str = "it", enabled: bool = True, initial: float = 0, file: TextIO | None = None,
                 log_every_s: float = LOG_EVERY_S, **bar_options: Any) -> Any:
    """A tqdm over ``iterable`` (or updated by hand up to ``total``).

    Args:
        enabled: False shows nothing anywhere (the object still iterates and takes updates).
        file: the stream a bar is drawn on (default ``sys.stderr``); when it is not a terminal
            no bar is drawn and progress goes to this module's logger instead.
        log_every_s: seconds between those log lines; 0 = no lines.
        bar_options: further tqdm options for the terminal bar (``bar_format``, ``unit_scale`` …;
            ``unit_scale`` and ``unit_divisor`` also shape the numbers of the log lines).
    """
    stream = sys.stderr if file is None else file
    if total is None and iterable is not None and hasattr(iterable, "__len__"):
        total = len(iterable)
    common = dict(total=total, desc=desc, unit=unit, initial=initial)
    notebook = file is None and auto_tqdm is not text_tqdm  # tqdm found a Jupyter kernel: its widget
    if enabled and (notebook or is_terminal(stream)):
        return tqdm(iterable, file=stream, dynamic_ncols=True, **common, **bar_options)
    if not enabled or log_every_s <= 0:
        return text_tqdm(iterable, disable=True, **common)
    scale = {k: v for k, v in bar_options.items() if k in ("unit_scale", "unit_divisor")}
    return text_tqdm(iterable, file=_LogLines(), bar_format=_LINE if total else _LINE_NO_TOTAL,
                     mininterval=log_every_s, maxinterval=log_every_s, delay=log_every_s, **common, **scale)


class _LogLines:
    """The file a non-terminal tqdm writes to: each display (``\\r`` + text, then a flush)
    becomes one log line; blank ones are dropped, and so is the display ``close()`` repeats of
    a count already logged (only its times differ)."""

    def __init__(self) -> None:
        self._pending: list[str] = []
        self._last_count = ""

    def write(self, text: str) -> int:
        self._pending.append(text)
        return len(text)

    def flush(self) -> None:
        line = "".join(self._pending).replace("\r", "").strip()
        self._pending.clear()
        count = line.partition(" [")[0]  # "embed:  40% 120/300", the line without its times
        if line and count != self._last_count:
            self._last_count = count
            logger.info("%s", line)

    def isatty(self) -> bool:
        return False
