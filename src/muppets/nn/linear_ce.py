"""Fused, chunked ``cross_entropy(h @ W.T + b, y)`` for large vocabularies on a CPU.

A 30k-way output layer over M rows materialises an ``(M, V)`` logits matrix (75 MB for 600
rows), then reads and writes it again for log-softmax, its backward and the bias broadcast:
memory traffic, not arithmetic, dominates. Here the rows are processed in chunks small enough
to stay in cache, and the gradient of each chunk is formed right after its loss, while the
logits are still hot (the idea of Liger-Kernel's fused linear cross entropy). The forward pass
therefore stores ``dL/dh``, ``dL/dW`` and ``dL/db`` (for ``reduction="sum"``); the backward pass
only scales them by the incoming gradient.
"""

from __future__ import annotations

import torch


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, bias, targets, chunk_rows: int):  # noqa: D401 - autograd API
        """h: ``(M, H)``, weight: ``(V, H)``, bias: ``(V,)``, targets: ``(M,)`` -> (loss sum, correct)."""
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1] or ctx.needs_input_grad[2]
        M = h.shape[0]
        acc = torch.promote_types(h.dtype, torch.float32)  # softmax in at least fp32
        loss = h.new_zeros((), dtype=acc)
        correct = torch.zeros((), dtype=torch.long)
        grad_h = torch.empty_like(h) if need_grad else None
        grad_w = torch.zeros_like(weight) if need_grad else None
        grad_b = torch.zeros_like(bias) if need_grad else None
        for start in range(0, M, chunk_rows):
            hc, yc = h[start:start + chunk_rows], targets[start:start + chunk_rows]
            logits = torch.addmm(bias, hc, weight.t()).to(acc)  # (m, V)
            lse = torch.logsumexp(logits, dim=-1)  # (m,)
            picked = logits.gather(1, yc[:, None]).squeeze(1)  # (m,)
            loss += (lse - picked).sum()
            correct += (logits.argmax(-1) == yc).sum()
            if need_grad:
                probs = logits.sub_(lse[:, None]).exp_()  # softmax, in place: (m, V)
                probs[torch.arange(len(yc)), yc] -= 1.0  # d(loss)/d(logits)
                probs = probs.to(h.dtype)
                grad_h[start:start + chunk_rows] = probs @ weight  # (m, H)
                grad_w.addmm_(probs.t(), hc)  # (V, H)
                grad_b += probs.sum(0)
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct):
        grad_h, grad_w, grad_b = ctx.saved_tensors
        g = grad_loss.to(grad_h.dtype)
        return grad_h * g, grad_w * g, grad_b * g, None, None


def linear_cross_entropy(
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    targets: torch.Tensor,
    chunk_rows: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross entropy of ``h @ weight.T + bias`` against ``targets``, and #argmax hits.

    Args:
        h: ``(M, H)`` hidden rows; weight: ``(V, H)``; bias: ``(V,)``; targets: ``(M,)`` in ``[0, V)``.
        chunk_rows: rows per chunk; ``chunk_rows * V * 4`` bytes should fit in the L2/L3 cache.

    Returns:
        ``(loss_sum, correct)``: a differentiable scalar and a long scalar (no gradient).
    """
    if h.shape[0] == 0:
        zero = (h.sum() + weight.sum() * 0 + bias.sum() * 0) * 0.0
        return zero, torch.zeros((), dtype=torch.long)
    return _LinearCrossEntropy.apply(h, weight, bias, targets, chunk_rows)
