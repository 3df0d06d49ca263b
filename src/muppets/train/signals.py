"""Stop long work cleanly on SIGINT/SIGTERM: a handler runs instead of the default (which kills the
process), so a training loop can finish its step or chunk, checkpoint and return."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["STOP_SIGNALS", "stop_signal_handler"]

logger = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # Ctrl-C, and what schedulers and `kill` send


@contextmanager
def stop_signal_handler(handler: Callable[[int, object], None], what: str = "training") -> Iterator[None]:
    """Call ``handler(signum, frame)`` on SIGINT/SIGTERM inside the block, then restore the
    previous handlers. Signals reach only the main thread: elsewhere it warns and does nothing."""
    if threading.current_thread() is not threading.main_thread():
        logger.warning("%s is not on the main thread: signals will not stop it cleanly", what)
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
