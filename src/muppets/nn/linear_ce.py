"""Fused ``cross_entropy(h @ W.T + b, y)`` for large vocabularies on a CPU.

A 30k-way output layer over M rows materialises an ``(M, V)`` logits matrix (75 MB for 600
rows; 823 MB for GPT's 4,096 rows over 50,257 tokens); the usual path then reads and writes it
again for log-softmax, for its backward, for the one-hot subtraction and the bias broadcast.
Here the gradient is formed in the forward pass, right after the loss, in place in the logits
buffer (the idea of Liger-Kernel's fused linear cross entropy): ``softmax - onehot`` overwrites
the logits and feeds the two gradient matmuls at once. The forward pass therefore stores
``dL/dh``, ``dL/dW`` and ``dL/db`` (for ``reduction="sum"``); the backward pass only scales
them by the incoming gradient.

Memory traffic outside the matmuls is what costs on a CPU, so each chunk of ``chunk_rows`` rows
makes few passes over its logits: the matmul writes them into a workspace buffer (kept between
training steps: a fresh 200 MB allocation pays ~50k page faults every time), one ``amax`` pass
for the accuracy (5x cheaper than ``argmax``, 7.9 vs 43.8 ms for 1,024 rows: a row is right when its target logit is the
largest), and ATen's row-wise softmax *in place* (each 200 KB row stays in L2 across its max,
exp-sum and scale). :func:`release_workspace` frees the kept buffer; one process-wide buffer
means calls must not run concurrently from several threads. The loss of a row is ``-log p_y``
from those probabilities; a row whose ``p_y`` is too small for that to be exact in fp32 (a loss
above ~69 nats) is recomputed as ``logsumexp(z) - z_y``. Without a bias (GPT's tied head) the matmul neither reads a broadcast
bias nor computes its gradient.
"""

from __future__ import annotations

import torch

_TINY = 1e-30  # p_y below this: recompute the row's loss as logsumexp - z_y (exact)
_workspace: dict[tuple, torch.Tensor] = {}  # (rows, V, dtype, device) -> the kept logits buffer (one at most)


def _buffer(rows: int, V: int, dtype: torch.dtype, device: torch.device, keep: bool) -> torch.Tensor:
    """A ``(rows, V)`` buffer; with ``keep`` the same one on every call of that shape."""
    key = (rows, V, dtype, device)
    buf = _workspace.get(key)
    if buf is None:
        buf = torch.empty(rows, V, dtype=dtype, device=device)
        if keep:
            _workspace.clear()
            _workspace[key] = buf
    return buf


def release_workspace() -> None:
    """Free the logits buffer kept between training steps (it is re-made on the next step)."""
    _workspace.clear()


def _softmax_(z: torch.Tensor) -> torch.Tensor:
    """Row softmax of ``z (m, V)`` written over ``z`` itself (one fused pass per row)."""
    return torch.ops.aten._softmax.out(z, -1, False, out=z)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, bias, targets, chunk_rows: int, track: bool):  # noqa: D401 - autograd API
        """h: ``(M, H)``, weight: ``(V, H)``, bias: ``(V,)`` or None, targets: ``(M,)`` -> (loss sum, correct).

        track: grad mode was on at the call (forward itself always runs without it); under
        ``no_grad`` / ``inference_mode`` no gradient is formed even for parameters.
        """
        grad_bias = track and bias is not None and ctx.needs_input_grad[2]
        need_grad = track and (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]) or grad_bias
        M, V = h.shape[0], weight.shape[0]
        acc = torch.promote_types(h.dtype, torch.float32)  # softmax in at least fp32
        loss = h.new_zeros((), dtype=acc)
        correct = torch.zeros((), dtype=torch.long)
        grad_h = torch.empty_like(h) if need_grad else None
        grad_w = torch.empty_like(weight) if need_grad else None  # written by the first chunk
        grad_b = torch.empty_like(bias) if grad_bias else None
        rows = min(M, chunk_rows)
        buf = _buffer(rows, V, h.dtype, h.device, keep=need_grad)  # every chunk's logits, in h.dtype
        zbuf = buf if acc == h.dtype else h.new_empty(rows, V, dtype=acc)  # fp32 copy under bf16
        for start in range(0, M, chunk_rows):
            hc, yc = h[start:start + chunk_rows], targets[start:start + chunk_rows]
            m = hc.shape[0]
            ignored = yc < 0  # (m,) rows without a target (IGNORE = -100): no loss, no gradient
            if bool(ignored.any()):
                yc = yc.clamp(min=0)
            else:
                ignored = None
            out = buf[:m]
            if bias is None:
                torch.mm(hc, weight.t(), out=out)  # (m, V)
            else:
                torch.addmm(bias, hc, weight.t(), out=out)
            z = out if zbuf is buf else zbuf[:m].copy_(out)  # (m, V) in acc
            z_y = z.gather(1, yc[:, None]).squeeze(1)  # (m,)
            hit = z_y >= z.amax(-1)  # (m,) the target is the argmax
            correct += (hit if ignored is None else hit & ~ignored).sum()
            probs = _softmax_(z)  # (m, V), z is gone
            p_y = probs.gather(1, yc[:, None]).squeeze(1)  # (m,)
            losses = -p_y.clamp(min=_TINY).log()
            tiny = (p_y < _TINY).nonzero().squeeze(1)
            if tiny.numel():  # a loss beyond fp32's p_y: recompute those rows' logits
                lz = torch.addmm(bias, hc[tiny], weight.t()) if bias is not None else hc[tiny] @ weight.t()
                losses[tiny] = lz.to(acc).logsumexp(-1) - z_y[tiny]
            if ignored is not None:
                losses = losses.masked_fill(ignored, 0.0)
            loss += losses.sum()
            if need_grad:
                probs[torch.arange(m), yc] -= 1.0  # d(loss)/d(logits)
                if ignored is not None:
                    probs.masked_fill_(ignored[:, None], 0.0)
                p = probs if zbuf is buf else out.copy_(probs)  # in h.dtype
                torch.mm(p, weight, out=grad_h[start:start + m])  # (m, H)
                if start == 0:
                    torch.mm(p.t(), hc, out=grad_w)  # (V, H)
                    if grad_b is not None:
                        torch.sum(p, 0, out=grad_b)
                else:
                    grad_w.addmm_(p.t(), hc)
                    if grad_b is not None:
                        grad_b += p.sum(0)
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct):
        grads = ctx.saved_tensors  # not scaled in place: a second backward (retain_graph) stays right
        g = grad_loss.to(grads[0].dtype)
        return *(None if t is None else t * g for t in grads), None, None, None


def linear_cross_entropy(
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    chunk_rows: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross entropy of ``h @ weight.T (+ bias)`` against ``targets``, and #argmax hits.

    Args:
        h: ``(M, H)`` hidden rows; weight: ``(V, H)``; bias: ``(V,)`` or None (no bias);
            targets: ``(M,)`` in ``[0, V)``, or negative (IGNORE, -100) for a row that has no
            target: it adds no loss, no hit and no gradient (padding rows, see
            :func:`pad_rows_to_bucket`).
        chunk_rows: rows per chunk; bounds the ``(chunk_rows, V)`` logits held at once. On a
            2-core EPYC one chunk for BERT's ~600 masked rows per batch measured fastest
            (fewer passes over ``W``), and 1,024 for GPT's 4,096 rows over 50,257 tokens
            (256: 4.48 s, 1,024: 4.20 s, 4,096: 4.36 s per forward+backward on one thread,
            ``benchmarks/output_layer_speed.py``).

    Returns:
        ``(loss_sum, correct)``: a differentiable scalar and a long scalar (no gradient).
    """
    if h.shape[0] == 0:
        zero = (h.sum() + weight.sum() * 0 + (0 if bias is None else bias.sum() * 0)) * 0.0
        return zero, torch.zeros((), dtype=torch.long)
    if torch.is_autocast_enabled(h.device.type):  # mixed precision: matmuls in the autocast
        dtype = torch.get_autocast_dtype(h.device.type)  # dtype, softmax and loss in fp32;
        with torch.autocast(h.device.type, enabled=False):  # the casts route the gradients
            return _LinearCrossEntropy.apply(h.to(dtype), weight.to(dtype),  # back to the fp32
                                             None if bias is None else bias.to(dtype),  # weights
                                             targets, chunk_rows, torch.is_grad_enabled())
    return _LinearCrossEntropy.apply(h, weight, bias, targets, chunk_rows, torch.is_grad_enabled())


ROW_BUCKET = 32  # under CPU bf16 autocast, masked-token rows are padded to a multiple of this


def pad_rows_to_bucket(h: torch.Tensor, targets: torch.Tensor, ignore: int = -100) -> tuple[torch.Tensor, torch.Tensor]:
    """``h (M, H)`` and ``targets (M,)`` padded with zero rows and ``ignore`` targets to a
    multiple of :data:`ROW_BUCKET` rows, under bfloat16 autocast on a CPU; unchanged otherwise.

    Why: the number of masked tokens changes from batch to batch, and oneDNN, which runs CPU
    bfloat16 matrix products, builds (just-in-time compiles) a new primitive for every new
    shape, forward and backward; for BERT-mini's ~600 masked rows that was 8 new primitives and
    65-120 ms of a ~0.85 s step, every step (``ONEDNN_VERBOSE=2``; BENCHMARKS.md, issue 54).
    Float32 products go to a BLAS that compiles nothing per shape. Bucketed, the rows take a
    few shapes, each built once."""
    if h.device.type != "cpu" or not torch.is_autocast_enabled("cpu") \
            or torch.get_autocast_dtype("cpu") != torch.bfloat16:
        return h, targets
    pad = -h.shape[0] % ROW_BUCKET
    if pad == 0:
        return h, targets
    return (torch.cat([h, h.new_zeros(pad, *h.shape[1:])]),  # (M', H)
            torch.cat([targets, targets.new_full((pad,), ignore)]))  # (M',)
