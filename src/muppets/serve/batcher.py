"""Dynamic batching: many requests, one model copy, one worker thread.

Each request is cut into :class:`Work` items (one per input) and handed to :meth:`Batcher.submit`
from the event loop; a single worker thread forms batches and runs the engine on them, so the
event loop keeps accepting, parsing and answering while the model computes.

**When a batch starts.** As soon as the inputs waiting with the oldest one's ``key`` fill the
token budget (``max_batch_tokens``, counted as the sum of their lengths) or the row limit
(``max_batch_size``), or when the oldest has waited ``max_wait_ms``, or when nothing else is on
its way: given ``expecting`` (the server's count of requests received but not yet queued), the
worker waits only while that count is above zero, so a lone request never waits for company
that is not coming. While the model runs, new inputs gather, so under load batches fill
without waiting. ``max_batch_size=1`` is serving without batching.

**Which inputs share it (length bucketing).** The oldest waiting input always goes (no input
starves); then, among inputs with the same ``key`` (an engine's notion of "can run together":
the route, and for generation the sampling settings), those closest to its length, oldest first
among equals, as long as ``rows x longest row`` stays within the token budget. Padding is
therefore small, and an input longer than the budget still runs, alone.

**Back-pressure.** At most ``queue_size`` inputs wait; a request that would go beyond is refused
whole (:class:`QueueFull`, the server's 503 with ``Retry-After``: the queue's expected drain time
at the measured seconds per input), so memory stays bounded under any load. A request of more
inputs than ``queue_size`` could never be queued, so it is refused for good
(:class:`RequestTooLarge`, the server's 413), not told to retry. Inputs of a cancelled request
(the client went away) are dropped before anything is counted: they take no place in the
queue, count toward no batch's fill and no queue depth.

**Shutdown.** :meth:`close` lets the worker run what is queued (no more waiting for batches to
fill), then stops it.

**Which thread.** By default the worker is a thread of its own. Given ``executor`` (a
one-thread executor), the worker loop runs on that executor's thread instead: the server loads
the model on the same thread, so all of torch's work happens on one thread (see
:func:`muppets.serve.app._load_on_model_thread` for why that matters on CPU).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Executor, Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

RunBatch = Callable[[Hashable, list["Work"]], list[Any]]  # (key, items) -> one result per item


class QueueFull(Exception):
    """The queue cannot take the request; retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the server is at capacity; retry after {retry_after} s")
        self.retry_after = retry_after


class RequestTooLarge(Exception):
    """A request of more inputs than the queue can ever hold; retrying cannot help."""

    def __init__(self, size: int, queue_size: int) -> None:
        super().__init__(f"the request has {size} inputs; this server queues at most {queue_size} inputs, so it "
                         f"can never be taken: send at most {queue_size} per request")
        self.size, self.queue_size = size, queue_size


class Ticket:
    """One request's share of the work: its results arrive here from the worker thread, and its
    future (on the event loop) resolves when the last one has."""

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop) -> None:
        self.results: list[Any] = [None] * size
        self.left = size
        self.loop = loop
        self.future: asyncio.Future = loop.create_future()
        self.cancelled = False  # the client went away: its waiting items are dropped, generation stops

    def deliver(self, index: int, value: Any) -> None:
        """Worker thread: record one result; resolve the future after the last."""
        self.results[index] = value
        self.left -= 1
        if self.left == 0:
            self.loop.call_soon_threadsafe(self._resolve, self.results, None)

    def fail(self, error: BaseException) -> None:
        """Worker thread: the request failed."""
        self.left = -1
        self.loop.call_soon_threadsafe(self._resolve, None, error)

    def _resolve(self, results: list[Any] | None, error: BaseException | None) -> None:
        if self.future.done():
            return
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(results)


@dataclass
class Work:
    """One input of a request, waiting for a batch."""

    key: Hashable  # only items with equal keys share a batch
    cost: int  # its length in tokens (budget and bucketing)
    payload: Any  # what the engine's run function receives
    ticket: Ticket | None = None
    index: int = 0  # position in the request
    arrived: float = field(default_factory=time.monotonic)


@dataclass
class BatchStats:
    """What :class:`Batcher` reports after each batch (for /metrics)."""

    size: int  # inputs in the batch
    padded_tokens: int  # rows x longest row
    seconds: float  # run time
    queue_depth: int  # inputs still waiting


class Batcher:
    """Groups :class:`Work` into batches and runs ``run_batch`` on them in one worker thread."""

    def __init__(self, run_batch: RunBatch, max_batch_tokens: int = 8192, max_batch_size: int = 64,
                 max_wait_ms: float = 5.0, queue_size: int = 1024,
                 on_batch: Callable[[BatchStats], None] | None = None, name: str = "muppets-batcher",
                 expecting: Callable[[], int] | None = None, executor: Executor | None = None) -> None:
        self.run_batch = run_batch
        self.expecting = expecting  # requests received but not yet queued (None: unknown, always wait)
        self.max_batch_tokens, self.max_batch_size = max_batch_tokens, max_batch_size
        self.max_wait = max_wait_ms / 1000.0
        self.queue_size = queue_size
        self.on_batch = on_batch
        self._pending: list[Work] = []
        self._cond = threading.Condition()
        self._closing = False
        self._seconds_per_input = 0.01  # running estimate, for Retry-After
        self._worker: Future | threading.Thread
        if executor is not None:
            self._worker = executor.submit(self._loop)
        else:
            self._worker = threading.Thread(target=self._loop, name=name, daemon=True)
            self._worker.start()

    @property
    def alive(self) -> bool:
        """Is the worker loop still running?"""
        if isinstance(self._worker, threading.Thread):
            return self._worker.is_alive()
        return not self._worker.done()

    @property
    def queue_depth(self) -> int:
        """Inputs waiting, those of cancelled requests left out."""
        with self._cond:
            return len(self._live())

    # ------------------------------------------------------------------ event loop side

    async def submit(self, items: Sequence[Work]) -> list[Any]:
        """Queue a request's items (all or none) and wait for their results, in order."""
        ticket = Ticket(len(items), asyncio.get_running_loop())
        self.enqueue(items, ticket)
        try:
            return await ticket.future
        finally:
            ticket.cancelled = True  # done, failed or abandoned: nothing of it is left to run

    def enqueue(self, items: Sequence[Work], ticket: Ticket) -> Ticket:
        """Queue ``items`` for ``ticket`` or raise :class:`RequestTooLarge` (never fits) or
        :class:`QueueFull` (not now); nothing is queued then."""
        if len(items) > self.queue_size:
            raise RequestTooLarge(len(items), self.queue_size)
        with self._cond:
            if self._closing:
                raise QueueFull(1)
            if len(self._live()) + len(items) > self.queue_size:
                raise QueueFull(self.retry_after())
            now = time.monotonic()
            for i, item in enumerate(items):
                item.ticket, item.index, item.arrived = ticket, i, now
            self._pending.extend(items)
            self._cond.notify()
        return ticket

    def nudge(self) -> None:
        """Wake the worker to re-check whether to wait (``expecting`` changed)."""
        with self._cond:
            self._cond.notify()

    def retry_after(self) -> int:
        """Seconds until the queue has drained, at the measured pace (at least 1)."""
        return max(1, math.ceil(self.queue_depth * self._seconds_per_input))

    def close(self, timeout: float = 30.0) -> None:
        """Run what is queued, then stop the worker (waits up to ``timeout`` seconds)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if isinstance(self._worker, threading.Thread):
            self._worker.join(timeout)
        else:
            wait_futures([self._worker], timeout)

    def _live(self) -> list[Work]:
        """Under the lock: drop the items of cancelled requests; the items still waiting."""
        self._pending = [w for w in self._pending if not w.ticket.cancelled]
        return self._pending

    # ------------------------------------------------------------------ worker side

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending:
                    return
                self._wait_for_fill()
                batch = self._take()
            if batch:
                self._run(batch)

    def _wait_for_fill(self) -> None:
        """Under the lock: until the oldest item's batch is full or it has waited long enough."""
        while not self._closing and self._live():
            oldest = self._pending[0]
            same = [w for w in self._pending if w.key == oldest.key]
            if len(same) >= self.max_batch_size or sum(w.cost for w in same) >= self.max_batch_tokens:
                return
            remaining = oldest.arrived + self.max_wait - time.monotonic()
            if remaining <= 0 or (self.expecting is not None and self.expecting() <= 0):
                return
            self._cond.wait(remaining)

    def _take(self) -> list[Work]:
        """Under the lock: the oldest live item and its closest-length companions (see module doc)."""
        if not self._live():
            return []
        anchor = self._pending[0]
        candidates = sorted((w for w in self._pending[1:] if w.key == anchor.key),
                            key=lambda w: (abs(w.cost - anchor.cost), w.arrived))
        batch, longest = [anchor], anchor.cost
        for w in candidates:
            if len(batch) >= self.max_batch_size:
                break
            if (len(batch) + 1) * max(longest, w.cost) <= self.max_batch_tokens:
                batch.append(w)
                longest = max(longest, w.cost)
        taken = {id(w) for w in batch}
        self._pending = [w for w in self._pending if id(w) not in taken]
        return batch

    def _run(self, batch: list[Work]) -> None:
        start = time.perf_counter()
        try:
            results = self.run_batch(batch[0].key, batch)
        except Exception as err:  # noqa: BLE001 - one request's bad input must not fail its batch mates
            self._isolate(batch, err)
        else:
            for w, value in zip(batch, results):
                w.ticket.deliver(w.index, value)
        seconds = time.perf_counter() - start
        self._seconds_per_input = 0.8 * self._seconds_per_input + 0.2 * seconds / len(batch)
        if self.on_batch is not None:
            self.on_batch(BatchStats(len(batch), len(batch) * max(w.cost for w in batch), seconds,
                                     self.queue_depth))

    def _isolate(self, batch: list[Work], err: Exception) -> None:
        """A batch failed: run each request's items on their own, so only the culprit fails."""
        tickets: dict[int, list[Work]] = {}
        for w in batch:
            tickets.setdefault(id(w.ticket), []).append(w)
        if len(tickets) == 1:
            log.warning("batch failed: %s", err)
            batch[0].ticket.fail(err)
            return
        for items in tickets.values():
            try:
                results = self.run_batch(items[0].key, items)
            except Exception as own:  # noqa: BLE001
                log.warning("request failed: %s", own)
                items[0].ticket.fail(own)
                continue
            for w, value in zip(items, results):
                w.ticket.deliver(w.index, value)
