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


def test_ignored_targets_add_no_loss_hit_or_gradient(one_thread):
    """Rows with target -100 (padding) are left out exactly as cross_entropy's ignore_index does."""
    h, w, y = _case(rows=40)
    y = y.clone()
    y[[3, 17, 18, 39]] = -100
    b = torch.randn(50, generator=torch.Generator().manual_seed(4), dtype=torch.float64, requires_grad=True)
    loss, correct = linear_cross_entropy(h, w, b, y, chunk_rows=16)
    logits = h @ w.T + b
    ref = F.cross_entropy(logits, y, reduction="sum", ignore_index=-100)
    assert torch.allclose(loss, ref, atol=1e-9)
    keep = y >= 0
    assert correct.item() == int((logits.argmax(-1) == y)[keep].sum())
    got = torch.autograd.grad(loss, (h, w, b))
    want = torch.autograd.grad(ref, (h, w, b))
    assert all(torch.allclose(g1, g2, atol=1e-9) for g1, g2 in zip(got, want))
    assert float(got[0][~keep].abs().max()) == 0.0


def test_bf16_rows_are_padded_to_few_shapes_without_changing_the_loss(one_thread):
    """Under CPU bf16 autocast the masked rows are padded to a multiple of ROW_BUCKET (oneDNN builds
    a primitive per shape); the loss, hits and gradients are those of the unpadded rows."""
    from muppets.nn.linear_ce import ROW_BUCKET, pad_rows_to_bucket

    h, w, y = _case(rows=45)
    h, w = h.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    assert pad_rows_to_bucket(h, y)[0].shape[0] == 45  # not under autocast: unchanged
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hp, yp = pad_rows_to_bucket(h, y)
        assert hp.shape[0] == yp.shape[0] == -(-45 // ROW_BUCKET) * ROW_BUCKET
        assert bool((yp[45:] == -100).all()) and torch.equal(hp[:45], h)
        padded = linear_cross_entropy(hp, w, None, yp)
        plain = linear_cross_entropy(h, w, None, y)
    assert torch.allclose(padded[0], plain[0], rtol=1e-3) and padded[1] == plain[1]
    g_pad = torch.autograd.grad(padded[0], (h, w))
    g_plain = torch.autograd.grad(plain[0], (h, w))
    assert all(torch.allclose(a, b, rtol=2e-2, atol=1e-3) for a, b in zip(g_pad, g_plain))
