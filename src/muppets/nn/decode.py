"""Decoding a few rows at a time on a CPU: weight copies laid out for matrix-vector products,
one intra-op thread for the body, and the output layer split over two cores.

A decoding step multiplies one row per sequence by every weight of the model, so it is bound by
reading the weights, not by arithmetic. What decided the speed on our 2-core EPYC (gpt-mini,
batch 1; ``benchmarks/decode_speed.py``, numbers in BENCHMARKS.md, issue 4):

* **Layout.** For one row, ``x @ W'`` with ``W' = W^T`` stored contiguous ``(in, out)`` beats
  ``F.linear(x, W)`` on ``nn.Linear``'s ``(out, in)`` storage once ``W`` has left the cache,
  which the output layer's 51 MB stream makes happen at every step: the body's 16 products took
  1.11 ms from the copies against 1.39 ms as stored, the output layer 1.8 ms against 6.2 ms.
  :class:`DecodeWeights` keeps the copies, in one flat buffer, and :func:`linear` uses them
  while :func:`use` is active.
* **Threads.** Intra-op threads do not help products of one row, and the body's many small ops
  lose with two OpenMP threads (:func:`single_threaded`). Two independent pieces of work do gain:
  the output layer split into two column halves computed by this thread and
  :func:`side_thread` at once (1.1 ms against 1.8 ms). Both gains depend on the host: when
  its memory bandwidth is scarce (busy neighbours on the shared machine), the split output
  layer and the one-thread body break even (BENCHMARKS.md).
* **No read-ahead.** Having the side thread read the body's copies while this thread runs the
  body (so that more of them are in cache) was neutral or worse in every kept measurement: with
  it, generate calls were faster in 9 of 20 and 2 of 20 paired rounds of ``decode_speed.py``
  (and 10 of 30 in an ad-hoc run), so it is gone; ``decode_speed.py`` keeps it as a variant.

Tried in ad-hoc experiments (not kept) and dropped: splitting each body product across the two threads (a handoff per product
costs more than half a product), giving the side thread a smaller share of the output layer plus
the read-ahead, an MKL pre-packed output weight, and reading each output half in 16 column blocks,
forwards and backwards on alternate steps so that the blocks read last would still be in the L3
cache (alone it won; inside ``generate()`` it lost 25 of 30 paired rounds).

Nothing here changes a result: the copies hold the same numbers as the parameters, and they are
rebuilt when any parameter changes (its ``_version`` or storage), which
:meth:`DecodeWeights.current` checks before every step.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn

_ACTIVE = threading.local()  # .weights: {id(layer): (W^T (in, out), bias)} while decoding

# The output layer of a decoding step, by rows B (gpt-mini: H 256, V 50,257; 2 threads), as
# measured inside generate() (benchmarks/output_layer_speed.py --generate-rows; BENCHMARKS.md):
# one row, the (H, V/2) halves on two cores; 2 to 15 rows, (V, H) @ (H, B) on every intra-op
# thread (about a third less time per step than blocks at 2 to 8 rows); 16 rows and more, OUTPUT_BLOCK
# columns of the halves at a time on every intra-op thread. Splitting many rows over this thread
# and the side thread won alone but lost inside generate() (our guess, not measured: after a body
# on two OpenMP threads, the second one still spins on the core the side thread needs).
TALL_ROWS, OUTPUT_BLOCK = 16, 8192


def parameter_key(params: Sequence[torch.Tensor]) -> list[tuple[int, int]]:
    """Storage and version of every tensor: changes when one is updated in place (an optimizer
    step, ``load_state_dict``) or given new data (``p.data = …``)."""
    return [(p.data_ptr(), p._version) for p in params]


class DecodeWeights:
    """Contiguous ``(in, out)`` copies of ``layers``' weights (and their biases) in one buffer.

    Args:
        layers: the linear layers of a model.
        output: the tied output weight ``(V, H)``, copied as two ``(H, V/2)`` halves.
    """

    def __init__(self, layers: Sequence[nn.Linear], output: torch.Tensor) -> None:
        self.layers = list(layers)  # kept alive: ``weights`` is keyed by their ids
        self.params = [p for layer in layers for p in (layer.weight, layer.bias) if p is not None] + [output]
        self.key = parameter_key(self.params)
        sizes = [layer.weight.numel() + (layer.out_features if layer.bias is not None else 0) for layer in layers]
        self.pack = torch.empty(sum(sizes), dtype=output.dtype, device=output.device)  # every copy, flat
        self.weights: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
        offset = 0
        with torch.no_grad():
            for layer in layers:
                n_out, n_in = layer.weight.shape
                wt = self.pack[offset:offset + n_in * n_out].view(n_in, n_out)
                wt.copy_(layer.weight.t())
                offset += n_in * n_out
                bias = None
                if layer.bias is not None:
                    bias = self.pack[offset:offset + n_out]
                    bias.copy_(layer.bias)
                    offset += n_out
                self.weights[id(layer)] = (wt, bias)
            V = output.shape[0]
            self.cut = (V + 1) // 2
            self.output = (output[:self.cut].t().contiguous(), output[self.cut:].t().contiguous())  # (H, cut), (H, V-cut)

    def current(self, output: torch.Tensor) -> bool:
        """Do the copies still equal the parameters? ``output`` is the model's output weight now
        (a resized vocabulary is a new tensor). A layer module swapped for another is not seen
        here: the model drops its copies in ``train()``."""
        return output is self.params[-1] and parameter_key(self.params) == self.key

    def logits(self, hidden: torch.Tensor, side: "SideThread | None" = None, block: int = OUTPUT_BLOCK) -> torch.Tensor:
        """``hidden (B, H)`` times the output weight: ``(B, V)``, the way that was fastest for
        ``B`` rows (see :data:`TALL_ROWS`): one row, the two column halves at once on this
        thread and the ``side`` thread; 2 to ``TALL_ROWS - 1`` rows, ``(V, H) @ (H, B)``; more,
        ``block`` columns at a time. The last two use every intra-op thread."""
        rows = hidden.shape[0]
        if 1 < rows < TALL_ROWS:
            return torch.mm(self.params[-1], hidden.t()).t().contiguous()  # (V, B) -> (B, V)
        out = hidden.new_empty(rows, self.cut + self.output[1].shape[1])
        parts = [(w, out[:, start:start + w.shape[1]]) for w, start in zip(self.output, (0, self.cut))]
        if rows > 1:
            for w, dest in parts:
                for s in range(0, w.shape[1], block):
                    torch.mm(hidden, w[:, s:s + block], out=dest[:, s:s + block])
            return out
        with single_threaded():
            if side is None:
                for w, dest in parts:
                    torch.mm(hidden, w, out=dest)
                return out
            side.submit(lambda: torch.mm(hidden, parts[1][0], out=parts[1][1]))
            try:
                torch.mm(hidden, parts[0][0], out=parts[0][1])
            finally:
                side.wait()
        return out


@contextlib.contextmanager
def use(weights: DecodeWeights) -> Iterator[None]:
    """Within this block (this thread only), :func:`linear` multiplies by ``weights``' copies."""
    previous = getattr(_ACTIVE, "weights", None)
    _ACTIVE.weights = weights.weights
    try:
        yield
    finally:
        _ACTIVE.weights = previous


def linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)``, ``(..., in) -> (..., out)``; inside :func:`use`, from the ``(in, out)`` copy."""
    active = getattr(_ACTIVE, "weights", None)
    if active is None or id(layer) not in active:
        return layer(x)
    wt, bias = active[id(layer)]
    rows = x.reshape(-1, x.shape[-1])  # (N, in)
    y = torch.mm(rows, wt) if bias is None else torch.addmm(bias, rows, wt)  # (N, out)
    return y.view(*x.shape[:-1], wt.shape[1])


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Run this thread's ops on one intra-op thread (one-row products lose with more), then restore."""
    n = torch.get_num_threads()
    if n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


class SideThread:
    """A helper thread that runs one function at a time (``submit`` … ``wait``) on another core.

    Its functions run under ``torch.inference_mode`` with one intra-op thread, so this thread and
    the caller use one core each. Exceptions are raised again by :meth:`wait`.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = 0
        threading.Thread(target=self._run, name="muppets-decode-side", daemon=True).start()

    def _run(self) -> None:
        torch.set_num_threads(1)  # this thread's OpenMP/MKL setting only
        with torch.inference_mode():
            while True:
                fn = self._jobs.get()
                try:
                    fn()
                    self._done.put(None)
                except BaseException as e:  # handed to the caller
                    self._done.put(e)

    def submit(self, fn: Callable[[], object]) -> None:
        self._pending += 1
        self._jobs.put(fn)

    def wait(self) -> None:
        """Block until every submitted function has finished; raise the first error."""
        error = None
        while self._pending:
            result = self._done.get()
            self._pending -= 1
            error = error or result
        if error is not None:
            raise error


_SIDES = threading.local()  # .side: the calling thread's helper


def side_thread() -> SideThread | None:
    """The calling thread's helper thread (made on first use; each thread that decodes has its
    own), or None when torch may use one thread only (``torch.set_num_threads(1)``)."""
    if torch.get_num_threads() < 2:
        return None
    side = getattr(_SIDES, "side", None)
    if side is None:
        side = _SIDES.side = SideThread()
    return side
