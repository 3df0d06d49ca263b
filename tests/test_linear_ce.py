"""The fused linear + cross entropy: no-bias form, huge losses, and the in-place softmax it relies on."""

import torch
import torch.nn.functional as F

from muppets.nn.linear_ce import _softmax_, linear_cross_entropy


def _case(rows=70, hidden=16, vocab=50, scale=1.0, seed=1):
    g = torch.Generator().manual_seed(seed)
    h = (scale * torch.randn(rows, hidden, generator=g, dtype=torch.float64)).requires_grad_()
    w = torch.randn(vocab, hidden, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, vocab, (rows,), generator=g)
    return h, w, y


def test_without_bias_matches_reference_and_gradients(one_thread):
    h, w, y = _case()
    loss, correct = linear_cross_entropy(h, w, None, y, chunk_rows=16)
    logits = h @ w.T
    assert torch.allclose(loss, F.cross_entropy(logits, y, reduction="sum"), atol=1e-6)
    assert correct.item() == int((logits.argmax(-1) == y).sum())
    # gradcheck perturbs every input once: a smaller case (3 chunks, the last one partial) keeps it quick
    h, w, y = _case(rows=21, hidden=6, vocab=20)
    torch.autograd.gradcheck(lambda h_, w_: linear_cross_entropy(h_, w_, None, y, 8)[0], (h, w))


def test_losses_beyond_fp32_probabilities_are_exact():
    """Rows whose target probability underflows fp32 (losses of hundreds of nats) are recomputed."""
    h, w, y = _case(rows=40, scale=40.0)
    h32, w32 = h.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    b32 = torch.randn(50, generator=torch.Generator().manual_seed(3))
    ref = F.cross_entropy(h32 @ w32.T + b32, y, reduction="none")
    assert ref.max() > 200  # the case really has such rows
    loss, _ = linear_cross_entropy(h32, w32, b32, y, chunk_rows=16)
    assert torch.isfinite(loss)
    assert torch.allclose(loss, ref.sum(), rtol=1e-5)
    loss.backward()
    h_ref, w_ref = h32.detach().clone().requires_grad_(), w32.detach().clone().requires_grad_()
    F.cross_entropy(h_ref @ w_ref.T + b32, y, reduction="sum").backward()
    assert torch.allclose(h32.grad, h_ref.grad, atol=1e-4) and torch.allclose(w32.grad, w_ref.grad, atol=1e-4)


def test_in_place_softmax_equals_torch_softmax():
    """The kernel writes its output over its input; this breaks loudly if ATen ever stops allowing it."""
    z = torch.randn(5, 50257) * 7
    ref = torch.softmax(z, -1)
    out = _softmax_(z)
    assert out.data_ptr() == z.data_ptr()
    assert torch.equal(out, ref)


def test_eval_without_grad_gives_the_same_loss():
    h, w, y = _case()
    with torch.no_grad():
        loss, correct = linear_cross_entropy(h.float(), w.float(), None, y, chunk_rows=32)
    assert torch.allclose(loss, F.cross_entropy(h.float() @ w.float().T, y, reduction="sum"), rtol=1e-5)


def test_training_and_inference_calls_interleave():
    """The buffer kept between training steps is an ordinary tensor, usable in inference mode and after."""
    h, w, y = _case(rows=64, vocab=40)
    h, w = h.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    ref = F.cross_entropy(h.detach() @ w.detach().T, y, reduction="sum")
    with torch.inference_mode():
        first, _ = linear_cross_entropy(h, w, None, y)
    loss, _ = linear_cross_entropy(h, w, None, y)
    loss.backward()
    with torch.inference_mode():
        again, _ = linear_cross_entropy(h, w, None, y)
    with torch.no_grad():
        plain, _ = linear_cross_entropy(h, w, None, y)
    for value in (first, loss.detach(), again, plain):
        assert torch.allclose(value, ref, rtol=1e-5)
    assert w.grad is not None and torch.isfinite(w.grad).all()
