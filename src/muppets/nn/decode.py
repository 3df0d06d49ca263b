"""Decoding a few rows at a time on a CPU: weight copies laid out for matrix-vector products,
one intra-op thread for the body, the output layer split over two cores, and for greedy
decoding an int8 screen that reads a quarter of the output layer's bytes.

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
* **Greedy screen.** Greedy decoding needs the largest logit, not all of them:
  :class:`GreedyScreen` finds it from an int8 copy of the output weight and recomputes in
  float32 only the rows that a proven error bound cannot rule out, so the token is the float32
  argmax, except that among logits equal within float32 rounding the screen may pick a different
  one of them (its float32 sums run in another order than the full product's). Inside
  ``generate()`` at batch 1 a step took 2.51 ms against 4.04 ms from the full logits
  (``benchmarks/greedy_screen.py``); sampling and beam search still need every logit.
* **No read-ahead.** Having the side thread read the body's copies while this thread runs the
  body (so that more of them are in cache) was neutral or worse in every kept measurement: with
  it, generate calls were faster in 9 of 20 and 2 of 20 paired rounds of ``decode_speed.py``
  (and 10 of 30 in an ad-hoc run), so it is gone; ``decode_speed.py`` keeps it as a variant.

Tried in ad-hoc experiments (not kept) and dropped: splitting each body product across the two threads (a handoff per product
costs more than half a product), giving the side thread a smaller share of the output layer plus
the read-ahead, an MKL pre-packed output weight, and reading each output half in 16 column blocks,
forwards and backwards on alternate steps so that the blocks read last would still be in the L3
cache (alone it won; inside ``generate()`` it lost 25 of 30 paired rounds).

The copies hold the same numbers as the parameters, and they are rebuilt when any parameter
changes (its ``_version`` or storage), which :meth:`DecodeWeights.current` checks before every
step. The products still sum in an order that depends on the path (rows in the batch, threads,
screen or not), so logits may differ within float32 rounding from a full forward pass's, and a
token may differ from it only where two logits are that close.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn

logger = logging.getLogger(__name__)

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
        self.screen: GreedyScreen | None | bool = None  # made by greedy(); False: cannot be used

    def greedy(self, hidden: torch.Tensor, side: "SideThread | None" = None) -> torch.Tensor:
        """``argmax(self.logits(hidden))``: the greedy token of each row ``(B,)``, from the
        :class:`GreedyScreen` (made on first use) when it can decide, else the full logits. The
        screen may pick another of several logits equal within float32 rounding."""
        if hidden.shape[0] > SCREEN_ROWS_PER_THREAD * torch.get_num_threads():
            return greedy_argmax(self.logits(hidden, side))
        if self.screen is None:
            self.screen = GreedyScreen.build(self.params[-1]) or False
        picked = self.screen.argmax(hidden) if self.screen else None
        return picked if picked is not None else greedy_argmax(self.logits(hidden, side))

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


ARGMAX_BLOCK = 256  # columns per block of greedy_argmax's first pass


def greedy_argmax(logits: torch.Tensor) -> torch.Tensor:
    """``logits.argmax(-1)`` of ``(B, V)``, the same indices (the first largest), in two passes:
    the largest value of every ``ARGMAX_BLOCK`` columns (``amax`` is vectorised; ``argmax`` over
    a 50k-wide row runs about 7x slower on this CPU), then ``argmax`` inside the first block that
    holds the row's largest value. Rows with a NaN fall back to ``argmax`` itself."""
    B, V = logits.shape
    n = V // ARGMAX_BLOCK
    if n < 2 or not logits.is_contiguous() or not logits.is_floating_point():
        return logits.argmax(-1)
    head = logits[:, :n * ARGMAX_BLOCK].view(B, n, ARGMAX_BLOCK)
    peaks = head.amax(-1)  # (B, n)
    if V > n * ARGMAX_BLOCK:  # the tail as one more block
        peaks = torch.cat([peaks, logits[:, n * ARGMAX_BLOCK:].amax(-1, keepdim=True)], 1)  # (B, n + 1)
    block = peaks.argmax(-1)  # (B,) the first block holding the row's maximum
    starts = block * ARGMAX_BLOCK  # (B,)
    cols = (starts[:, None] + torch.arange(ARGMAX_BLOCK, device=logits.device)).clamp_(max=V - 1)  # (B, blk)
    window = logits.gather(1, cols)  # (B, blk); a tail block repeats its last column (never first)
    index = starts + window.argmax(-1)
    nan_rows = torch.isnan(peaks).any(-1)  # (B,)
    if bool(nan_rows.any()):  # argmax's NaN rule, row by row
        index[nan_rows] = logits[nan_rows].argmax(-1)
    return index


# ----------------------------------------------------------------------------- greedy screen

# The screen's int8 kernel is bound by arithmetic with many rows (it widens the weights again for
# every 4 rows): inside generate() (gpt-mini, benchmarks/greedy_screen.py, 8 paired rounds) it won
# up to 32 rows on two threads (5% at 32) and up to 8 on one, was even at 16 on one (2%, 7 of 8
# rounds), and lost from 32 rows on one thread and 64 on two.
SCREEN_ROWS_PER_THREAD = 16
SCREEN_MAX_CANDIDATES = 4096  # more candidates in a row than this: the full fp32 logits instead
_U = 2.0 ** -24  # unit roundoff of float32
_KERNEL_WARNED = False  # the kernel check's warning is logged once per process


def _int8_matmul(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """torch's private int8 CPU kernel: ``x (B, H)`` bfloat16 times ``(q * scale)^T``, ``q (V, H)``
    int8, ``scale (V,)`` bfloat16; ``(B, V)`` bfloat16. One name, so that a test can replace it."""
    return torch.ops.aten._weight_int8pack_mm(x, q, scale)


class GreedyScreen:
    """The greedy token ``argmax(hidden @ W^T)`` without reading the float32 output weight.

    A decoding step of a small model spends most of its time reading the ``(V, H)`` output
    weight (gpt-mini: 51 MB a step). The screen reads an int8 copy (a quarter of the bytes,
    with one bfloat16 scale per row) through torch's ``_weight_int8pack_mm`` kernel, then
    recomputes in float32 only the rows that could still be the largest, so the answer is the
    float32 argmax (the first one on exact ties), except that among logits equal within float32
    rounding it may pick a different one of them: the candidates' float32 sums run in another
    order than the full product's (``F.linear`` on the rows alone does not reproduce the full
    product bit for bit either), so on such near-ties the two can disagree.

    Why no other row can win: for row ``i`` with float32 weights ``w``, int8 weights times
    scale ``w~`` (exact in float32: 8 bits times 8 bits) and ``h~ = bf16(h)``, the kernel
    returns ``y = bf16(fl(h~ . w~))``, so the exact ``h . w`` is within

        e = |h| |w - w~| + |h - h~| |w~| + g |h~| |w~| + 2^-8 |y|   (Cauchy-Schwarz)

    of ``y``, ``g = (H+1)u / (1 - (H+1)u)`` bounding float32 summation in any order (``u =
    2^-24``). A float32 evaluation of ``h . w`` (ours, or transformers') is within ``g |h| |w|``
    of the exact value. With ``E`` at least ``e`` plus that for every row, the row holding the
    float32 maximum has ``y >= max(y) - 2E``; those candidate rows are recomputed in float32 and
    the largest of these recomputed values wins. For gpt-mini, random or pretrained, ``E`` was
    2-3% of the spread of a step's logits, and the candidates a median of one row and at most 31
    (``benchmarks/greedy_screen.py``). :meth:`argmax` returns None (the caller takes the full
    logits) when a row has more than :data:`SCREEN_MAX_CANDIDATES` candidates or a value that
    is not finite. The threshold ``max(y) - 2E`` is itself rounded: the relative margin on
    ``E`` covers that, since ``E >= 2^-8 |max(y)|``.

    The bound rests on the private kernel's arithmetic, which other builds may change, so
    :meth:`build` first runs the kernel on a few probe vectors against float64 products of the
    real weight and declines (warning once) when an error exceeds the bound.

    Args:
        weight: the output weight ``(V, H)``, float32; ``H`` a multiple of 16 (the kernel reads
            16 values at a time). :meth:`build` returns None when the screen cannot be used.
    """

    def __init__(self, weight: torch.Tensor, chunk: int = 4096) -> None:
        V = weight.shape[0]
        self.q = torch.empty(weight.shape, dtype=torch.int8)  # (V, H)
        self.scale = torch.empty(V, dtype=torch.bfloat16)  # (V,)
        error_norm = weight_norm = 0.0
        with torch.no_grad():
            for s in range(0, V, chunk):  # in row chunks: the float64 temporaries stay small
                w = weight[s:s + chunk]
                scale = (w.abs().amax(1) / 127).to(torch.bfloat16)
                scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero row is exact
                q = (w / scale.float()[:, None]).round_().clamp_(-127, 127).to(torch.int8)
                self.q[s:s + chunk], self.scale[s:s + chunk] = q, scale
                approx = q.double() * scale.double()[:, None]  # what the kernel multiplies by
                error_norm = max(error_norm, float((w.double() - approx).norm(dim=1).max()))  # max |w - w~|
                weight_norm = max(weight_norm, float(torch.maximum(approx.norm(dim=1), w.double().norm(dim=1)).max()))
        self.error_norm = error_norm * (1 + 1e-6)  # computed in float64: rounded up by a relative 1e-6
        self.weight_norm = weight_norm * (1 + 1e-6)
        H = weight.shape[1]
        self.gamma = (H + 1) * _U / (1 - (H + 1) * _U)
        self.weight = weight  # (V, H) float32: the candidates are recomputed from it

    @classmethod
    def build(cls, weight: torch.Tensor) -> "GreedyScreen | None":
        """A screen for ``weight``, or None where it cannot run (not float32 on a CPU, ``H`` not a
        multiple of 16, weights that are not finite, no int8 kernel in this torch, or a kernel
        whose error exceeds the bound: :meth:`kernel_error_ratio`)."""
        if (weight.dtype != torch.float32 or weight.device.type != "cpu" or weight.dim() != 2
                or weight.shape[1] % 16 or not hasattr(torch.ops.aten, "_weight_int8pack_mm")
                or not bool(torch.isfinite(weight).all())):
            return None
        screen = cls(weight)
        worst = screen.kernel_error_ratio()
        if worst <= 1.0:
            return screen
        global _KERNEL_WARNED
        log = logger.debug if _KERNEL_WARNED else logger.warning
        _KERNEL_WARNED = True
        log("torch._weight_int8pack_mm exceeded the greedy screen's error bound %.3gx on a probe (another "
            "build of the kernel?): greedy decoding uses the full float32 logits", worst)
        return None

    @torch.no_grad()
    def kernel_error_ratio(self, chunk: int = 4096) -> float:
        """The largest ratio of the kernel's error to the bound :meth:`scores` gives, over probe
        vectors (random ones and weight rows, from a fixed seed) times the real weight, against
        float64 products: at most 1 where the bound holds (not finite: it does not)."""
        V, H = self.weight.shape
        g = torch.Generator().manual_seed(0)  # not the global generator: decoding draws nothing
        picked = self.weight[torch.randint(0, V, (2,), generator=g)]  # (2, H)
        aligned = picked * (H ** 0.5 / picked.norm(dim=1).clamp_min(1e-30))[:, None]  # (2, H): large logits
        probe = torch.cat([torch.randn(2, H, generator=g), aligned])  # (4, H)
        y, bound = self.scores(probe)  # (4, V), (4,)
        ratio = 0.0
        for s in range(0, V, chunk):  # float64 temporaries of one chunk at a time
            exact = probe.double() @ self.weight[s:s + chunk].double().t()  # (4, chunk)
            err = (y[:, s:s + chunk].double() - exact).abs().amax(1)  # (4,)
            worst = float((err / bound.double()).max())
            ratio = max(ratio, worst if worst == worst else float("inf"))  # NaN: no usable number
        return ratio

    def scores(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The kernel's logits ``y (B, V)`` of ``hidden (B, H)`` and a bound ``E (B,)``: every
        logit of row ``b``, exact or from any float32 evaluation, is within ``E[b]`` of ``y``."""
        h = hidden.float().contiguous()  # (B, H)
        hb = h.to(torch.bfloat16)  # (B, H): the kernel's input
        y = _int8_matmul(hb, self.q, self.scale).float()  # (B, V)
        low, high = torch.aminmax(y, dim=1)  # (B,), (B,)
        h_norm = h.norm(dim=1)  # (B,)
        round_norm = (h - hb.float()).norm(dim=1)  # (B,): |h - bf16(h)|
        bound = (h_norm * self.error_norm
                 + (round_norm + self.gamma * (2 * h_norm + round_norm)) * self.weight_norm
                 + 2.0 ** -8 * torch.maximum(low.abs(), high.abs()))  # (B,): e, plus float32's error
        return y, bound * (1 + 2.0 ** -10) + 1e-30  # margin: the bound's own rounding; subnormals

    def argmax(self, hidden: torch.Tensor) -> torch.Tensor | None:
        """The index of each row's largest logit of ``hidden (B, H) @ W^T``: ``(B,)`` long, or None
        (take the full logits) when the screen cannot decide. Among logits equal within float32
        rounding, it may differ from ``argmax`` of another float32 product (see the class).
        Uses torch's intra-op threads."""
        B = hidden.shape[0]
        h = hidden.float()
        y, bound = self.scores(h)  # (B, V), (B,)
        high = y.amax(1)  # (B,)
        if not bool(torch.isfinite(bound).all() & torch.isfinite(high).all()):
            return None
        rows, cols = (y >= (high - 2 * bound)[:, None]).nonzero(as_tuple=True)  # (N,), (N,): row-major
        if rows.numel() > SCREEN_MAX_CANDIDATES and bool(
                (torch.bincount(rows, minlength=B) > SCREEN_MAX_CANDIDATES).any()):
            return None  # recomputing that many rows would cost about as much as the full logits
        exact = (self.weight.index_select(0, cols) * h.index_select(0, rows)).sum(1)  # (N,) float32
        if B == 1:
            return cols[exact.argmax()].view(1)  # the first of equal maxima: cols ascend
        best = torch.full((B,), float("-inf")).scatter_reduce_(0, rows, exact, "amax")  # (B,)
        first = torch.where(exact == best[rows], cols, torch.full_like(cols, self.weight.shape[0]))
        return torch.full((B,), self.weight.shape[0], dtype=torch.long).scatter_reduce_(0, rows, first, "amin")


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
