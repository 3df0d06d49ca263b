"""The dynamic batcher on its own: budgets, bucketing, waiting, back-pressure, failures, draining."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from muppets.serve.batcher import Batcher, QueueFull, Work


class Recorder:
    """A run function that records its batches (and can be slowed down or made to fail)."""

    def __init__(self, delay: float = 0.0, fail_on: object = None) -> None:
        self.batches: list[list] = []
        self.delay, self.fail_on = delay, fail_on
        self.lock = threading.Lock()

    def __call__(self, key, items):
        with self.lock:
            self.batches.append([w.payload for w in items])
        time.sleep(self.delay)
        if any(w.payload == self.fail_on for w in items):
            raise ValueError(f"bad payload {self.fail_on}")
        return [(key, w.payload) for w in items]


def run(coro):
    return asyncio.run(coro)


def items(costs, key="k"):
    return [Work(key, c, p) for p, c in costs]


def test_results_come_back_in_order_and_batched():
    rec = Recorder()
    b = Batcher(rec, max_batch_tokens=1000, max_batch_size=8, max_wait_ms=50)

    async def main():
        return await asyncio.gather(*(b.submit(items([(f"{r}-{i}", 5) for i in range(3)])) for r in range(4)))

    out = run(main())
    b.close()
    assert out == [[("k", f"{r}-{i}") for i in range(3)] for r in range(4)]
    assert max(len(x) for x in rec.batches) > 1  # requests that arrive together share a batch


def test_a_given_executor_runs_the_worker_on_its_thread():
    """The server loads the model on a one-thread executor and hands it to the batcher, so every
    batch runs on the loading thread (torch's OpenMP pools: see ``muppets.serve.app``)."""
    from concurrent.futures import ThreadPoolExecutor

    executor = ThreadPoolExecutor(1)
    loader = executor.submit(threading.get_ident).result()
    seen = []
    b = Batcher(lambda key, its: seen.append(threading.get_ident()) or [w.payload for w in its],
                max_wait_ms=1, executor=executor)
    assert run(b.submit(items([("a", 1), ("b", 1)]))) == ["a", "b"]
    b.close()
    assert not b.alive
    executor.shutdown()
    assert seen and set(seen) == {loader}


def test_token_budget_and_row_limit_hold():
    rec = Recorder()
    b = Batcher(rec, max_batch_tokens=40, max_batch_size=3, max_wait_ms=30)

    async def main():
        return await b.submit(items([(i, 10) for i in range(10)] + [("long", 100)]))

    run(main())
    b.close()
    assert ["long"] in rec.batches  # longer than the budget: runs alone
    for batch in rec.batches:
        assert len(batch) <= 3
        assert batch == ["long"] or len(batch) * 10 <= 40


def test_length_bucketing_groups_similar_lengths():
    rec = Recorder()
    b = Batcher(rec, max_batch_tokens=200, max_batch_size=4, max_wait_ms=30)
    costs = [("s1", 5), ("L1", 50), ("s2", 6), ("L2", 48), ("s3", 5), ("L3", 49), ("s4", 4), ("L4", 50)]

    run(b.submit(items(costs)))
    b.close()
    assert sorted(map(sorted, rec.batches)) == [["L1", "L2", "L3", "L4"], ["s1", "s2", "s3", "s4"]]


def test_keys_never_mix():
    rec = Recorder()
    b = Batcher(rec, max_batch_tokens=1000, max_batch_size=8, max_wait_ms=30)

    async def main():
        return await asyncio.gather(b.submit(items([("a1", 3), ("a2", 3)], key="a")),
                                    b.submit(items([("b1", 3), ("b2", 3)], key="b")))

    assert run(main()) == [[("a", "a1"), ("a", "a2")], [("b", "b1"), ("b", "b2")]]
    b.close()
    assert all(len({p[0] for p in batch}) == 1 for batch in rec.batches)


def test_batch_size_one_is_no_batching():
    rec = Recorder()
    b = Batcher(rec, max_batch_size=1, max_wait_ms=1000)
    start = time.monotonic()
    run(b.submit(items([(i, 4) for i in range(5)])))
    b.close()
    assert rec.batches == [[0], [1], [2], [3], [4]]
    assert time.monotonic() - start < 1.0  # a full (one-row) batch does not wait


def test_a_lone_request_waits_only_for_requests_on_their_way():
    coming = [0]
    b = Batcher(Recorder(), max_batch_size=8, max_wait_ms=400, expecting=lambda: coming[0])

    async def timed():
        t0 = time.monotonic()
        await b.submit(items([("x", 1)]))
        return time.monotonic() - t0

    assert run(timed()) < 0.2  # nobody else on the way: no wait
    coming[0] = 1
    assert run(timed()) >= 0.35  # another request is being read: wait for it (up to max_wait)
    b.close()


def test_full_queue_refuses_whole_requests_with_retry_after():
    rec = Recorder(delay=0.2)
    b = Batcher(rec, max_batch_size=1, max_wait_ms=0, queue_size=3)

    async def main():
        first = asyncio.ensure_future(b.submit(items([("a", 1)])))
        await asyncio.sleep(0.05)  # "a" is running; the queue is empty again
        second = asyncio.ensure_future(b.submit(items([("b", 1), ("c", 1), ("d", 1)])))
        await asyncio.sleep(0)
        with pytest.raises(QueueFull) as full:
            await b.submit(items([("e", 1)]))
        assert full.value.retry_after >= 1
        return await first, await second

    assert run(main()) == ([("k", "a")], [("k", "b"), ("k", "c"), ("k", "d")])
    b.close()
    assert ["e"] not in rec.batches


def test_a_failing_input_fails_only_its_request():
    rec = Recorder(fail_on="bad")
    b = Batcher(rec, max_batch_tokens=1000, max_batch_size=8, max_wait_ms=50)

    async def main():
        return await asyncio.gather(b.submit(items([("ok1", 2)])), b.submit(items([("bad", 2)])),
                                    b.submit(items([("ok2", 2)])), return_exceptions=True)

    ok1, bad, ok2 = run(main())
    b.close()
    assert ok1 == [("k", "ok1")] and ok2 == [("k", "ok2")]
    assert isinstance(bad, ValueError)


def test_close_drains_the_queue():
    rec = Recorder(delay=0.02)
    b = Batcher(rec, max_batch_size=1, max_wait_ms=10_000)
    loop = asyncio.new_event_loop()
    try:
        from muppets.serve.batcher import Ticket

        ticket = Ticket(4, loop)
        b.enqueue(items([(i, 1) for i in range(4)]), ticket)
        b.close(timeout=5)
        assert not b.alive
        loop.run_until_complete(asyncio.sleep(0))
        assert ticket.future.result() == [("k", i) for i in range(4)]
        with pytest.raises(QueueFull):
            b.enqueue(items([("late", 1)]), Ticket(1, loop))
    finally:
        loop.close()


@pytest.mark.parametrize("name", ["muppets.serve.errors", "muppets.sentence.pooling"])
def test_doctests(name):
    import doctest
    import importlib

    assert doctest.testmod(importlib.import_module(name)).failed == 0


def test_heap_trimmer_trims_at_most_once_per_interval():
    import platform

    from muppets.heap import HeapTrimmer

    if platform.libc_ver()[0] == "glibc":
        assert HeapTrimmer(1.0).trim is not None  # malloc_trim (or tcmalloc's release) is found
    assert HeapTrimmer(0).trim is None  # interval 0: off
    trimmer, calls = HeapTrimmer(0.05), []
    trimmer.trim = lambda: calls.append(0)
    trimmer.maybe()
    assert calls == []  # not yet: the interval starts at creation
    time.sleep(0.06)
    trimmer.maybe()
    trimmer.maybe()
    assert calls == [0] and trimmer.count == 1


def test_bf16_linear_pads_rows_to_few_buckets_and_returns_the_real_ones():
    import torch

    from muppets.serve.engines import Bf16Linear, bucket_rows, to_bf16_linears

    sizes = {bucket_rows(n) for n in range(1, 8193)}
    assert len(sizes) == 39 and all(bucket_rows(n) >= n for n in range(1, 8193))
    assert all(bucket_rows(n) <= 1.25 * n for n in range(129, 8193))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 5), torch.nn.LayerNorm(5))
    reference = torch.nn.Linear(8, 5)
    reference.load_state_dict(model[0].state_dict())
    to_bf16_linears(model)
    assert type(model[0]) is Bf16Linear and model[0].weight.dtype == torch.bfloat16
    assert model[1].weight.dtype == torch.float32
    x = torch.randn(3, 7, 8)  # 21 rows -> a bucket of 32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = model[0](x)
        want = torch.nn.functional.linear(x.reshape(-1, 8), model[0].weight, model[0].bias).reshape(3, 7, 5)
    assert got.shape == (3, 7, 5) and got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=1e-2)
    torch.testing.assert_close(got.float(), reference(x), rtol=0.05, atol=0.05)
    torch.testing.assert_close(model[0](x), got)  # outside autocast too (it casts its input)


def test_a_request_larger_than_the_queue_is_refused_for_good_not_told_to_retry():
    from muppets.serve.batcher import RequestTooLarge

    b = Batcher(Recorder(), max_wait_ms=0, queue_size=4)

    async def main():
        with pytest.raises(RequestTooLarge, match="5 inputs; this server queues at most 4"):
            await b.submit(items([(str(i), 1) for i in range(5)]))  # on an empty queue: it can never fit
        return await b.submit(items([(str(i), 1) for i in range(4)]))

    assert run(main()) == [("k", str(i)) for i in range(4)]
    b.close()


def test_cancelled_inputs_count_toward_neither_queue_depth_nor_queue_full():
    from muppets.serve.batcher import Ticket

    b = Batcher(Recorder(), max_batch_tokens=10_000, max_wait_ms=10_000, queue_size=3)  # the worker waits to fill
    loop = asyncio.new_event_loop()
    gone = b.enqueue(items([("a", 1), ("b", 1), ("c", 1)]), Ticket(3, loop))
    assert b.queue_depth == 3
    with pytest.raises(QueueFull):
        b.enqueue(items([("d", 1)]), Ticket(1, loop))
    gone.cancelled = True  # the client went away
    assert b.queue_depth == 0
    b.enqueue(items([("d", 1), ("e", 1), ("f", 1)]), Ticket(3, loop))  # the queue has room for three again
    assert b.queue_depth == 3
    b.close()
    loop.close()


def test_cancelled_inputs_do_not_fill_a_batch():
    """Three abandoned inputs and one live one with max_batch_size 4: the live one still waits
    max_wait for company (a batch is not 'full' of inputs nobody will run)."""
    from muppets.serve.batcher import Ticket

    rec = Recorder()
    b = Batcher(rec, max_batch_tokens=10_000, max_batch_size=4, max_wait_ms=400, queue_size=16)
    loop = asyncio.new_event_loop()
    gone = b.enqueue(items([("a", 1), ("b", 1), ("c", 1)]), Ticket(3, loop))
    gone.cancelled = True

    async def late():
        t0 = time.monotonic()
        await b.submit(items([("d", 1)]))
        return time.monotonic() - t0

    assert run(late()) >= 0.3  # waited for company (the cancelled three would have "filled" it at once)
    b.close()
    loop.close()
    assert rec.batches == [["d"]]
