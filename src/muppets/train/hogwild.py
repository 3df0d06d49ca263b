"""Lock-free parallel SGD over chunks of a corpus (Hogwild!, Niu et al. 2011), on CPU processes.

Sparse models (word2vec) update a few rows of large matrices per example; word2vec.c and gensim
let several threads update them without locks, because two threads rarely touch the same row at
the same moment. Here a :class:`ChunkWorker` trains one chunk of the corpus per call, on tensors
placed in shared memory; :class:`HogwildPool` runs ``processes`` spawned copies of it, feeding
chunk numbers in order. Processes, not threads: a ``torch.compile``-d CPU kernel holds the GIL
while it runs, so threads would take turns.

A span ``[first, stop)`` of chunks is trained by :meth:`HogwildPool.run_span` (or
:func:`run_span_inline` in this process). No chunk is started once ``should_stop()`` is true (the
time budget ran out, a signal came) — except the first, so that a run always progresses — and
every started chunk is finished, so the trained chunks are always a prefix ``[first, returned)``:
a checkpoint after a span is a clean position.

The parent owns the processes' lives: they ignore SIGINT and SIGTERM (a Ctrl-C reaches the whole
process group; the parent decides to stop at a chunk boundary), they are stopped and joined when
the pool exits, also when any process's start-up fails, and they exit when the parent is gone.
"""

from __future__ import annotations

import logging
import queue
import signal
import traceback
from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.multiprocessing as mp

__all__ = ["ChunkWorker", "HogwildPool", "run_span_inline"]

logger = logging.getLogger(__name__)

OnResult = Callable[[int, int, dict[str, float]], None]  # (epoch, chunk, stats)
ShouldStop = Callable[[], bool]  # True: start no further chunk (checked between chunks)
_PARENT_SIGNALS = {signal.SIGINT, signal.SIGTERM}  # handled by the parent alone


class ChunkWorker(Protocol):
    """Picklable: its tensors are shared-memory tensors, shared with every process."""

    def setup(self) -> str:
        """Prepare this process (e.g. compile a kernel); return a short note (e.g. the backend)."""
        ...

    def run(self, epoch: int, chunk: int) -> dict[str, float]:
        """Train chunk ``chunk`` of epoch ``epoch``; return its statistics."""
        ...


def run_span_inline(worker: ChunkWorker, epoch: int, first: int, stop: int, should_stop: ShouldStop,
                    on_result: OnResult) -> int:
    """Train chunks ``[first, stop)`` here, in order; return the first chunk not trained."""
    k = first
    while k < stop and (k == first or not should_stop()):
        on_result(epoch, k, worker.run(epoch, k))
        k += 1
    return k


def _serve(worker: ChunkWorker, tasks: Any, results: Any) -> None:
    """A pool process: set up, then train the chunks it is sent until it gets None, or until
    the parent is gone (killed: ``daemon`` only covers a parent that exits normally)."""
    for sig in _PARENT_SIGNALS:  # blocked since the start (see HogwildPool._start): ignore, unblock
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _PARENT_SIGNALS)
    torch.set_num_threads(1)
    parent = mp.parent_process()
    try:
        results.put(("ready", worker.setup()))
        while True:
            try:
                task = tasks.get(timeout=1.0)
            except queue.Empty:
                if parent is not None and not parent.is_alive():
                    return
                continue
            if task is None:
                return
            epoch, chunk = task
            results.put(("done", epoch, chunk, worker.run(epoch, chunk)))
    except BaseException:  # noqa: BLE001 - report anything to the parent, which raises it
        results.put(("error", traceback.format_exc()))


class HogwildPool:
    """``processes`` spawned processes training chunks with one shared :class:`ChunkWorker`.

    Use as a context manager; ``notes`` holds what each process's ``setup`` returned. If a
    process fails to start or set up, every started process is stopped and joined before the
    error is raised; on leaving the block normally, the processes finish their queued chunks and
    exit; on an exception, they are killed at once.
    """

    def __init__(self, worker: ChunkWorker, processes: int, in_flight_per_process: int = 2) -> None:
        ctx = mp.get_context("spawn")
        self.tasks, self.results = ctx.Queue(), ctx.Queue()
        self.max_in_flight = processes * in_flight_per_process
        self.procs = [ctx.Process(target=_serve, args=(worker, self.tasks, self.results), daemon=True,
                                  name=f"hogwild-{i}") for i in range(processes)]
        self.notes: list[str] = []

    def __enter__(self) -> HogwildPool:
        try:
            self._start()
            self.notes = [self._receive()[1] for _ in self.procs]
        except BaseException:
            self._stop(graceful=False)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self._stop(graceful=exc_type is None)

    def _start(self) -> None:
        """Start the processes with SIGINT/SIGTERM blocked: they inherit the mask, so a signal
        during their start-up waits until ``_serve`` ignores it (here it is delivered after)."""
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _PARENT_SIGNALS)
        try:
            for proc in self.procs:
                proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _stop(self, graceful: bool, timeout: float = 30.0) -> None:
        """Stop and join every started process: ``graceful`` sends each the end-of-work message
        and waits up to ``timeout`` seconds before killing it (SIGKILL: they ignore SIGTERM)."""
        started = [proc for proc in self.procs if proc.pid is not None]
        if graceful:
            for _ in started:
                self.tasks.put(None)
            for proc in started:
                proc.join(timeout=timeout)
        for proc in started:
            if proc.is_alive():
                proc.kill()
            proc.join()

    def run_span(self, epoch: int, first: int, stop: int, should_stop: ShouldStop, on_result: OnResult) -> int:
        """Train chunks ``[first, stop)`` on the processes; return the first chunk not trained."""
        k, in_flight = first, 0
        while True:
            while in_flight < self.max_in_flight and k < stop and (k == first or not should_stop()):
                self.tasks.put((epoch, k))
                k, in_flight = k + 1, in_flight + 1
            if in_flight == 0:
                return k
            _, done_epoch, chunk, stats = self._receive()
            on_result(done_epoch, chunk, stats)
            in_flight -= 1

    def _receive(self) -> tuple:
        """The next message from a process; raises if one failed or died."""
        while True:
            try:
                message = self.results.get(timeout=1.0)
            except queue.Empty:
                dead = [p for p in self.procs if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"{dead[0].name} exited with code {dead[0].exitcode}") from None
                continue
            if message[0] == "error":
                raise RuntimeError(f"a Hogwild worker process failed:\n{message[1]}")
            return message
