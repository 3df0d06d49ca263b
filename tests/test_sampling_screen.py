"""Top-k sampling through the greedy screen (``DecodeWeights.top_k``,
``GPTLanguageModel.next_token_top_k``): the candidates it returns must give the same filtered
distribution as the full float32 logits, and generate() must draw only tokens top-k allows."""

from __future__ import annotations

import pytest
import torch

from muppets.generate import GenerationConfig, filter_logits, generate
from muppets.models.gpt import GPTConfig, GPTLanguageModel
from muppets.nn import decode

V = 997


def tiny() -> GPTLanguageModel:
    torch.manual_seed(0)
    cfg = GPTConfig(variant="gpt2", vocab_size=V, max_position_embeddings=64, hidden_size=32, num_layers=2,
                    num_heads=4, intermediate_size=64, initializer_range=0.3)
    return GPTLanguageModel(cfg).eval()


def spread(logits: torch.Tensor, ids: torch.Tensor | None) -> torch.Tensor:
    """Candidate probabilities ``(B, N)`` back on the vocabulary ``(B, V)``."""
    return logits if ids is None else torch.zeros(logits.shape[0], V).scatter_add_(1, ids, logits)


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("scale", [0.1, 1.0, 20.0])
def test_top_k_candidates_give_the_full_logits_distribution(rows, scale):
    plan = tiny()._decode_weights()
    g = torch.Generator().manual_seed(rows)
    hidden = torch.randn(rows, 32, generator=g) * scale
    full = plan.logits(hidden)  # (B, V)
    for k, top_p, temperature in [(1, 1.0, 1.0), (5, 1.0, 1.0), (40, 0.9, 0.7), (300, 0.5, 1.5)]:
        logits, ids = plan.top_k(hidden, k)
        assert ids is not None and ids.shape == logits.shape and logits.shape[1] < V  # the screen decided
        assert k <= logits.shape[1]
        cfg = GenerationConfig(do_sample=True, top_k=k, top_p=top_p, temperature=temperature)
        expected = filter_logits(full, cfg).softmax(-1)
        got = spread(filter_logits(logits, cfg).softmax(-1), ids)
        assert torch.allclose(got, expected, atol=1e-6), (k, float((got - expected).abs().max()))
        kept = set(full.topk(k, dim=1).indices[0].tolist())  # the k largest are all candidates
        assert kept <= set(ids[0][torch.isfinite(logits[0])].tolist())


@pytest.mark.parametrize("native_bf16", [False, True])
def test_top_k_falls_back_to_the_full_logits(monkeypatch, native_bf16):
    from muppets.train import precision

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native_bf16)
    plan = tiny()._decode_weights()
    hidden = torch.randn(2, 32)
    logits, ids = plan.top_k(hidden, V)  # k = V: nothing to screen
    assert ids is None and torch.equal(logits, plan.logits(hidden))
    many = torch.randn(decode.SCREEN_ROWS_PER_THREAD * torch.get_num_threads() + 1, 32)
    logits, ids = plan.top_k(many, 5)  # more rows than the int8 screen serves
    if not native_bf16:  # the full logits
        assert ids is None and logits.shape == (many.shape[0], V)
    else:  # the bfloat16 screen: its candidates hold every row's 5 largest logits
        full = plan.logits(many)
        want = full.topk(5, dim=1).indices
        assert ids is not None and all(set(w.tolist()) <= set(i.tolist()) for w, i in zip(want, ids))
    bad = hidden.clone()
    bad[0, 0] = float("inf")
    logits, ids = plan.top_k(bad, 5)  # a bound that is not finite: the full logits
    assert ids is None


def test_top_k_sampling_draws_only_allowed_tokens():
    model = tiny()
    prompts = [[1, 2, 3], [4, 5]]
    greedy = generate(model, prompts, GenerationConfig(max_new_tokens=12, stop_at_eos=False))
    top1 = generate(model, prompts, GenerationConfig(max_new_tokens=12, stop_at_eos=False, do_sample=True,
                                                     top_k=1, seed=0))
    assert top1 == greedy  # top-1 sampling keeps only the largest logit
    cfg = GenerationConfig(max_new_tokens=12, stop_at_eos=False, do_sample=True, top_k=3, seed=5)
    drawn = generate(model, [[7, 8, 9]], cfg)[0]
    assert drawn == generate(model, [[7, 8, 9]], cfg)[0]  # seeded
    ids = [7, 8, 9]
    with torch.no_grad():
        for token in drawn:  # each draw is among the 3 largest logits of a full forward pass
            logits = model(torch.tensor([ids])).logits[0, -1]
            assert token in logits.topk(3).indices.tolist()
            ids.append(token)


def test_choose_with_top_k_draws_from_the_filtered_distribution():
    """choose() draws among the k kept tokens only (not over the whole vocabulary): the draws
    follow filter_logits' distribution, and a tie at the k-th value keeps every tied token."""
    from muppets.generate import choose

    logits = torch.tensor([[2.0, 0.5, 1.5, -1.0, 1.0, 3.0, 0.0]] * 2)
    cfg = GenerationConfig(do_sample=True, top_k=3, top_p=0.95, temperature=0.8)
    expected = filter_logits(logits, cfg).softmax(-1)  # (2, 7)
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([choose(logits, cfg, g) for _ in range(3000)])  # (3000, 2)
    freq = torch.zeros(2, 7).scatter_add_(1, draws.t(), torch.ones(2, 3000)) / 3000
    assert torch.equal(freq > 0, expected > 0)  # never a filtered token
    assert float((freq - expected).abs().max()) < 0.03
    tied = torch.tensor([[3.0, 2.0, 2.0, 1.0]])
    picks = {int(choose(tied, GenerationConfig(do_sample=True, top_k=2), g)) for _ in range(200)}
    assert picks == {0, 1, 2}  # both tokens tied at the 2nd value stay, as filter_logits keeps them
