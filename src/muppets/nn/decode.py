"""Decoding a few rows at a time on a CPU: weight copies laid out for matrix-vector products,
and for greedy decoding an int8 screen that reads a quarter of the output layer's bytes.

A decoding step multiplies one row per sequence by every weight of the model, so it is bound by
reading the weights, not by arithmetic (``benchmarks/decode_speed.py``, BENCHMARKS.md, issue 4):

* **Layout.** For a few rows, ``x @ W'`` with ``W' = W^T`` stored contiguous ``(in, out)`` beats
  ``F.linear(x, W)`` on ``nn.Linear``'s ``(out, in)`` storage. :class:`DecodeWeights` keeps the
  body's copies in one flat buffer (:func:`linear` uses them while :func:`use` is active) and
  the output weight as one ``(H, V)`` copy, multiplied in one product at every batch size.
* **Greedy screen.** Greedy decoding needs the largest logit, not all of them:
  :class:`GreedyScreen` finds it from an int8 copy of the output weight and recomputes in
  float32 only the rows that a proven error bound cannot rule out, so the token is the float32
  argmax, except that among logits equal within float32 rounding the screen may pick a different
  one of them (its float32 sums run in another order than the full product's). Sampling and beam
  search still need every logit.
* **Nothing process-wide.** Decoding starts no thread and never calls ``torch.set_num_threads``
  (whose value also seeds every thread started later): it is safe from many threads at once,
  in a forked child, and inside servers. Earlier versions ran one-row products on one intra-op
  thread and split the output layer with a helper thread; both are gone (BENCHMARKS.md, issue 15).
  One exception, for the child of ``os.fork()`` (``multiprocessing``'s default start method on
  Linux): torch's OpenMP threads do not survive a fork, and a child that runs a parallel op after
  its parent did hangs (any op, not only ours); importing this module registers a handler that
  gives such a child one intra-op thread, as torch's own DataLoader workers have.

**The copies' contract.** Copies are only as good as their check. :meth:`DecodeWeights.current`
compares every parameter's storage and version counter (cheap, at every step): that sees
optimizer steps, ``load_state_dict``, any in-place op and ``p.data = …``. Writes that bypass the
version counter (in-place ops on ``p.data``, numpy views) are seen by :meth:`DecodeWeights.probe`,
which compares one element of every row of every weight (and every bias) with the values read
when the copies were made: once per :func:`session` (``generate()`` opens one per call) and at
every step outside one. A dense update (EMA, an optimizer through ``.data``, a reload) or a
rewritten row is always caught; a single element changed behind the version counter may not be,
so after such a write call ``model.weights_changed()``. Weights must not change *during* a
``generate()`` call.

The products sum in an order that depends on the path (rows in the batch, threads, screen or
not), so logits may differ within float32 rounding from a full forward pass's, and a token may
differ from it only where two logits are that close.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn

logger = logging.getLogger(__name__)

_ACTIVE = threading.local()  # .weights: {id(layer): (W^T (in, out), bias)} while decoding; .probed: see session()
BUILD_LOCK = threading.RLock()  # one thread builds a model's copies (and what is derived from them); the others wait

def _one_thread_in_forked_child() -> None:
    if torch.get_num_threads() > 1:
        torch.set_num_threads(1)


os.register_at_fork(after_in_child=_one_thread_in_forked_child)


def parameter_key(params: Sequence[torch.Tensor]) -> list[tuple[int, int]]:
    """Storage and version of every tensor: changes when one is updated in place (an optimizer
    step, ``load_state_dict``) or given new data (``p.data = …``)."""
    return [(p.data_ptr(), p._version) for p in params]


def _probe_index(param: torch.Tensor) -> torch.Tensor:
    """Flat indices of one element per row of a matrix, at columns drawn from a fixed seed
    (every element of a vector): what :meth:`DecodeWeights.probe` compares."""
    if param.dim() < 2:
        return torch.arange(param.numel())
    rows, cols = param.shape[0], param[0].numel()
    g = torch.Generator().manual_seed(rows * 7919 + cols)  # not the global generator
    return torch.arange(rows) * cols + torch.randint(0, cols, (rows,), generator=g)


class DecodeWeights:
    """Contiguous ``(in, out)`` copies of ``layers``' weights (and their biases) in one buffer,
    and the greedy screen of the ``output`` weight, with the checks that say whether they still
    match the parameters (the module docstring's contract).

    Args:
        layers: the linear layers of a model.
        output: the tied output weight ``(V, H)``, copied as ``(H, V)`` (and as the int8 screen).
        watched: other parameters that what is :meth:`derived` from these copies reads directly
            (GPT's compiled step: layer norms, position embeddings): checked like the rest.
    """

    def __init__(self, layers: Sequence[nn.Linear], output: torch.Tensor,
                 watched: Sequence[torch.Tensor] = ()) -> None:
        self.layers = list(layers)  # kept alive: ``weights`` is keyed by their ids
        self.params = ([p for layer in layers for p in (layer.weight, layer.bias) if p is not None]
                       + list(watched) + [output])
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
            self.probes = [(i, p.detach().reshape(-1)[i].clone()) for p in self.params for i in [_probe_index(p)]]
            self.output_t = output.t().contiguous()  # (H, V)
        self.output = output  # (V, H): the screens are made from it
        self.screen: GreedyScreen | None | bool = None  # int8, few rows; made on first use; False: cannot be used
        self.wide_screen: GreedyScreen | None | bool = None  # bfloat16, many rows (native bf16 CPUs)
        self._derived: dict[str, object] = {}  # see derived()

    def greedy(self, hidden: torch.Tensor) -> torch.Tensor:
        """``argmax(self.logits(hidden))``: the greedy token of each row ``(B,)``, from the
        :class:`GreedyScreen` (made on first use) when it can decide, else the full logits. The
        screen may pick another of several logits equal within float32 rounding."""
        screen = self._screen(hidden)
        picked = screen.argmax(hidden) if screen else None
        return picked if picked is not None else greedy_argmax(self.logits(hidden))

    def top_k(self, hidden: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What sampling with top-k needs of ``self.logits(hidden)``: ``(logits (B, N), ids (B, N))``,
        the float32 logits of every token that may be among a row's ``k`` largest (a superset of
        them, ``-inf`` where a row has fewer than ``N``) and their token ids, found by the
        :class:`GreedyScreen` (:meth:`GreedyScreen.top_k`); or, where it cannot decide,
        ``(all logits (B, V), None)``. Top-k keeps the same tokens from either (except among
        logits equal within float32 rounding), so the filtered distribution is the same."""
        screen = self._screen(hidden)
        found = screen.top_k(hidden, k) if screen else None
        return found if found is not None else (self.logits(hidden), None)

    def _screen(self, hidden: torch.Tensor) -> "GreedyScreen | None":
        """The screen for ``hidden``'s rows (made on first use): the int8 one for a few rows; for
        more, the bfloat16 one on a CPU with native bfloat16 products (AMX, AVX512-BF16), where
        they run several times faster than float32's; else None (the full logits)."""
        wide = hidden.shape[0] > SCREEN_ROWS_PER_THREAD * torch.get_num_threads()
        if wide and self.wide_screen is None:
            from muppets.train import precision  # not at import: the CPU check reads /proc/cpuinfo

            with BUILD_LOCK:  # many threads decoding one model build it once
                if self.wide_screen is None:
                    self.wide_screen = (precision.cpu_has_native_bf16()
                                        and GreedyScreen.build(self.output, kind="bf16")) or False
        if not wide and self.screen is None:
            with BUILD_LOCK:
                if self.screen is None:
                    like = self._derived.get("int8f")  # the same int8 weights, if made first
                    self.screen = GreedyScreen.build(self.output, like=like or None) or False
        return (self.wide_screen if wide else self.screen) or None

    def derived(self, name: str, make: Callable[[], object]) -> object | None:
        """A model's own object made from the same parameters and valid exactly as long as these
        copies (GPT's compiled batch-1 step, :class:`~muppets.nn.decode_native.GPTStep`): made
        once by ``make`` (None: cannot be made, not tried again)."""
        if name not in self._derived:
            with BUILD_LOCK:
                if name not in self._derived:
                    self._derived[name] = make()
        return self._derived[name]

    def exact_input_screen(self) -> "GreedyScreen | None":
        """The ``int8f`` screen (:mod:`muppets.nn.decode_native`: float32 input and sums) for
        compiled batch-1 steps, sharing the int8 screen's quantised weights when that exists."""
        like = self.screen if isinstance(self.screen, GreedyScreen) else None
        return self.derived("int8f", lambda: GreedyScreen.build(self.output, kind="int8f", like=like))

    def current(self, output: torch.Tensor) -> bool:
        """Do storage and version counters still match? ``output`` is the model's output weight
        now (a resized vocabulary is a new tensor). A layer module swapped for another is not
        seen here: the model drops its copies in ``train()``."""
        return output is self.params[-1] and parameter_key(self.params) == self.key

    @torch.no_grad()
    def probe(self) -> bool:
        """Do the probed elements (one per row of every weight, every bias) still hold the
        values read when the copies were made? Sees writes that bypass the version counter."""
        return all(torch.equal(p.detach().reshape(-1)[i], v) for p, (i, v) in zip(self.params, self.probes))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden (B, H)`` times the output weight: ``(B, V)``, on every intra-op thread."""
        return torch.mm(hidden, self.output_t)


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
def session() -> Iterator[None]:
    """One generation call on this thread: the copies a step uses are probed
    (:meth:`DecodeWeights.probe`) once in the block instead of at every step."""
    previous = getattr(_ACTIVE, "probed", None)
    _ACTIVE.probed = set()
    try:
        yield
    finally:
        _ACTIVE.probed = previous


def needs_probe(weights: DecodeWeights) -> bool:
    """Must ``weights`` be probed before this step? Yes outside a :func:`session`, and the first
    time inside one."""
    probed = getattr(_ACTIVE, "probed", None)
    return probed is None or id(weights) not in probed


def mark_probed(weights: DecodeWeights) -> None:
    """``weights`` match the parameters for the rest of this thread's :func:`session`."""
    probed = getattr(_ACTIVE, "probed", None)
    if probed is not None:
        probed.add(id(weights))


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
# every 4 rows), while the float32 product of many rows reuses each weight it reads: above this
# many rows per intra-op thread the full logits are faster (gpt-mini inside generate(),
# benchmarks/gpt_speed.py --gen-batch-sizes; where the crossover lies depends on the CPU:
# BENCHMARKS.md, issue 15).
SCREEN_ROWS_PER_THREAD = 4
SCREEN_MAX_CANDIDATES = 4096  # more candidates in a row than this: the full fp32 logits instead
_U = 2.0 ** -24  # unit roundoff of float32
_KERNEL_WARNED = False  # the kernel check's warning is logged once per process


def _int8_matmul(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """torch's private int8 CPU kernel: ``x (B, H)`` bfloat16 times ``(q * scale)^T``, ``q (V, H)``
    int8, ``scale (V,)`` bfloat16; ``(B, V)`` bfloat16. One name, so that a test can replace it."""
    return torch.ops.aten._weight_int8pack_mm(x, q, scale)


def _bf16_matmul(x: torch.Tensor, wt: torch.Tensor) -> torch.Tensor:
    """``x (B, H)`` times ``wt (H, V)``, both bfloat16: products exact in float32, summed in float32,
    the result rounded to bfloat16 (oneDNN's AMX / AVX512-BF16 kernels); ``(B, V)`` bfloat16."""
    return torch.mm(x, wt)


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

    **One row, compiled** (``kind="int8f"``): the same int8 weights and scales multiplied by the
    float32 hidden state with float32 sums (:mod:`muppets.nn.decode_native`, inside the compiled
    decoding step): ``h~ = h`` and ``y`` is rounded to float32 only, so the bound's input term is 0
    and its output term ``2^-22 |y|`` instead of ``2^-8 |y|``.

    **Many rows** (``kind="bf16"``). The int8 kernel widens the weights again for every few
    rows, so with many rows it is slower than float32; on a CPU with native bfloat16 products
    (AMX, AVX512-BF16) the screen's copy is instead ``W^T`` rounded to bfloat16 (half the
    bytes), multiplied by oneDNN's bfloat16 kernel (products exact in float32, float32 sums,
    the result rounded to bfloat16): the same bound holds with ``w~ = bf16(w)``.

    The bound rests on the kernel's arithmetic, which other builds may change, so :meth:`build`
    first runs the kernel on a few probe vectors against float64 products of the real weight and
    declines (warning once) when an error exceeds the bound.

    Args:
        weight: the output weight ``(V, H)``, float32; ``H`` a multiple of 16 (the int8 kernel
            reads 16 values at a time). :meth:`build` returns None when the screen cannot be used.
        kind: ``int8`` (``_weight_int8pack_mm``, for a few rows), ``int8f`` (the compiled kernel,
            one row) or ``bf16`` (many rows).
        like: an ``int8`` / ``int8f`` screen of the same weight whose quantised copy is shared.
    """

    KERNELS = {"int8": "torch._weight_int8pack_mm", "int8f": "compiled int8", "bf16": "bfloat16 matrix"}

    def __init__(self, weight: torch.Tensor, chunk: int = 4096, kind: str = "int8",
                 like: "GreedyScreen | None" = None) -> None:
        V, H = weight.shape
        self.kind = kind
        self.gamma = (H + 1) * _U / (1 - (H + 1) * _U)
        self.weight = weight  # (V, H) float32: the candidates are recomputed from it
        if kind == "int8f":
            from muppets.nn import decode_native  # not at import: it may compile

            self.native = decode_native.load()
        if (like is not None and like.weight is weight and like.kind in ("int8", "int8f")
                and kind in ("int8", "int8f")):
            self.q, self.scale, self.error_norm, self.weight_norm = like.q, like.scale, like.error_norm, like.weight_norm
            return
        if kind in ("int8", "int8f"):
            self.q = torch.empty(weight.shape, dtype=torch.int8)  # (V, H)
            self.scale = torch.empty(V, dtype=torch.bfloat16)  # (V,)
        elif kind == "bf16":
            self.wt = torch.empty(H, V, dtype=torch.bfloat16)  # (H, V): W^T rounded to bfloat16
        else:
            raise ValueError(f"unknown screen kind {kind!r}")
        error_norm = weight_norm = 0.0
        with torch.no_grad():
            for s in range(0, V, chunk):  # in row chunks: the float64 temporaries stay small
                w = weight[s:s + chunk]
                if kind == "bf16":
                    wb = w.to(torch.bfloat16)
                    self.wt[:, s:s + chunk] = wb.t()
                    approx = wb.double()
                else:
                    scale = (w.abs().amax(1) / 127).to(torch.bfloat16)
                    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero row is exact
                    q = (w / scale.float()[:, None]).round_().clamp_(-127, 127).to(torch.int8)
                    self.q[s:s + chunk], self.scale[s:s + chunk] = q, scale
                    approx = q.double() * scale.double()[:, None]  # what the kernel multiplies by
                error_norm = max(error_norm, float((w.double() - approx).norm(dim=1).max()))  # max |w - w~|
                weight_norm = max(weight_norm, float(torch.maximum(approx.norm(dim=1), w.double().norm(dim=1)).max()))
        self.error_norm = error_norm * (1 + 1e-6)  # computed in float64: rounded up by a relative 1e-6
        self.weight_norm = weight_norm * (1 + 1e-6)

    @classmethod
    def build(cls, weight: torch.Tensor, kind: str = "int8", like: "GreedyScreen | None" = None) -> "GreedyScreen | None":
        """A screen for ``weight``, or None where it cannot run (not float32 on a CPU, ``H`` not a
        multiple of 16, weights that are not finite, no int8 kernel in this torch, no C compiler
        for ``int8f``, or a kernel whose error exceeds the bound: :meth:`kernel_error_ratio`)."""
        if (weight.dtype != torch.float32 or weight.device.type != "cpu" or weight.dim() != 2
                or weight.shape[1] % 16 or not weight.is_contiguous() or not bool(torch.isfinite(weight).all())
                or (kind == "int8" and not hasattr(torch.ops.aten, "_weight_int8pack_mm"))):
            return None
        screen = cls(weight, kind=kind, like=like)
        if kind == "int8f" and screen.native is None:
            return None
        worst = screen.kernel_error_ratio()
        if worst <= 1.0:
            return screen
        global _KERNEL_WARNED
        log = logger.debug if _KERNEL_WARNED else logger.warning
        _KERNEL_WARNED = True
        log("the greedy screen's %s product exceeded its error bound %.3gx on a probe (another build of the "
            "kernel?): greedy decoding uses the full float32 logits", cls.KERNELS[kind], worst)
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
        if self.kind == "bf16":  # as many rows as it serves: the kernel oneDNN picks depends on them
            probe = probe.repeat(-(-(SCREEN_ROWS_PER_THREAD * torch.get_num_threads() + 1) // 4), 1)  # (P, H)
        y, bound = self.scores(probe)  # (P, V), (P,)
        ratio = 0.0
        for s in range(0, V, chunk):  # float64 temporaries of one chunk at a time
            exact = probe.double() @ self.weight[s:s + chunk].double().t()  # (P, chunk)
            err = (y[:, s:s + chunk].double() - exact).abs().amax(1)  # (P,)
            worst = float((err / bound.double()).max())
            ratio = max(ratio, worst if worst == worst else float("inf"))  # NaN: no usable number
        return ratio

    def scores(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The kernel's logits ``y (B, V)`` of ``hidden (B, H)`` and a bound ``E (B,)``: every
        logit of row ``b``, exact or from any float32 evaluation, is within ``E[b]`` of ``y``."""
        h = hidden.float().contiguous()  # (B, H)
        if self.kind == "int8f":
            from muppets.nn import decode_native

            return decode_native.screen_scores(self.native, self, h)
        hb = h.to(torch.bfloat16)  # (B, H): the kernel's input
        if self.kind == "bf16":
            y = _bf16_matmul(hb, self.wt).float()  # (B, V)
        else:
            y = _int8_matmul(hb, self.q, self.scale).float()  # (B, V)
        peak = torch.maximum(y.amax(1), y.amin(1).neg())  # (B,) max |y|: aminmax and an inf-norm run ~8x slower
        h_norm = h.norm(dim=1)  # (B,)
        round_norm = (h - hb.float()).norm(dim=1)  # (B,): |h - bf16(h)|
        bound = (h_norm * self.error_norm
                 + (round_norm + self.gamma * (2 * h_norm + round_norm)) * self.weight_norm
                 + 2.0 ** -8 * peak)  # (B,): e, plus float32's error
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
            return cols.index_select(0, exact.argmax().view(1))  # the first of equal maxima: cols ascend
        best = torch.full((B,), float("-inf")).scatter_reduce_(0, rows, exact, "amax")  # (B,)
        first = torch.where(exact == best[rows], cols, torch.full_like(cols, self.weight.shape[0]))
        return torch.full((B,), self.weight.shape[0], dtype=torch.long).scatter_reduce_(0, rows, first, "amin")

    def top_k(self, hidden: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The tokens that may be among the ``k`` largest logits of each row of ``hidden (B, H) @ W^T``
        and their float32 logits: ``(logits (B, N), ids (B, N))``, a row's unused slots ``-inf``
        (id 0); or None (take the full logits) when the screen cannot decide.

        Why no other token can be among the ``k`` largest float32 logits: with ``y`` the kernel's
        logits, ``t`` the ``k``-th largest of them and ``E`` the bound of :meth:`scores`, the ``k``
        tokens with ``y >= t`` have float32 logits ``>= t - E``, so the ``k``-th largest float32
        logit is ``>= t - E`` and a token above it has ``y >= t - 2E``. Those candidates are
        recomputed in float32; top-k over them keeps the tokens top-k over all logits keeps, except
        among logits equal within float32 rounding (the sums run in another order)."""
        B, V = hidden.shape[0], self.weight.shape[0]
        if not 0 < k < V:
            return None
        h = hidden.float()
        y, bound = self.scores(h)  # (B, V), (B,)
        kth = y.topk(k, dim=1, sorted=False).values.amin(1)  # (B,)
        if not bool(torch.isfinite(bound).all() & torch.isfinite(kth).all()):
            return None  # bound is not finite where any y is not (it holds max |y|)
        rows, cols = (y >= (kth - 2 * bound)[:, None]).nonzero(as_tuple=True)  # (N,), (N,): row-major
        counts = torch.bincount(rows, minlength=B)  # (B,)
        widest = int(counts.max())
        if widest > SCREEN_MAX_CANDIDATES:
            return None
        exact = (self.weight.index_select(0, cols) * h.index_select(0, rows)).sum(1)  # (N,) float32
        if B == 1:
            return exact[None], cols[None]
        slot = torch.arange(rows.numel()) - (counts.cumsum(0) - counts).index_select(0, rows)  # (N,)
        logits = torch.full((B, widest), float("-inf")).index_put_((rows, slot), exact)
        ids = torch.zeros((B, widest), dtype=torch.long).index_put_((rows, slot), cols)
        return logits, ids
