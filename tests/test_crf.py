"""CRF: the forward algorithm and Viterbi against brute-force enumeration of every tag sequence on
tiny random inputs (with padding), a sequence score by hand, probabilities that sum to one,
padding invariance, gradients, and a toy tagger that needs transitions to be right."""

from __future__ import annotations

import doctest
import itertools
import math

import pytest
import torch

from muppets.nn import crf as crf_module
from muppets.nn.crf import CRF


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def _random_crf(C: int, seed: int) -> CRF:
    g = torch.Generator().manual_seed(seed)
    crf = CRF(C)
    with torch.no_grad():
        for p in (crf.transitions, crf.start, crf.end):
            p.copy_(torch.randn(p.shape, generator=g))
    return crf


def _score_by_hand(crf: CRF, emissions: torch.Tensor, tags: list[int]) -> float:
    """s(y) written out for one unpadded sequence (emissions (n, C))."""
    start, end, trans = crf.start.tolist(), crf.end.tolist(), crf.transitions.tolist()
    s = start[tags[0]] + end[tags[-1]]
    s += sum(float(emissions[t, y]) for t, y in enumerate(tags))
    s += sum(trans[a][b] for a, b in zip(tags, tags[1:]))
    return s


def _batch(seed: int = 0, B: int = 3, T: int = 4, C: int = 3, lengths=(4, 2, 1)):
    g = torch.Generator().manual_seed(seed + 100)
    emissions = torch.randn(B, T, C, generator=g)
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    return emissions, mask


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_forward_algorithm_and_viterbi_equal_brute_force(seed):
    crf = _random_crf(3, seed)
    emissions, mask = _batch(seed)
    log_z = crf.log_partition(emissions, mask).detach()
    paths = crf.decode(emissions, mask)
    for b, n in enumerate(mask.sum(1).tolist()):
        scores = {tags: _score_by_hand(crf, emissions[b, :n], list(tags))
                  for tags in itertools.product(range(3), repeat=n)}
        expected = math.log(sum(math.exp(s) for s in scores.values()))
        assert float(log_z[b]) == pytest.approx(expected, abs=1e-5)
        assert tuple(paths[b]) == max(scores, key=scores.get)
        assert len(paths[b]) == n


def test_sequence_score_by_hand_and_probabilities_sum_to_one():
    crf = _random_crf(2, 5)
    emissions, mask = _batch(5, B=2, T=3, C=2, lengths=(3, 2))
    tags = torch.tensor([[1, 0, 1], [0, 1, 1]])  # row 2's last tag is padding
    score = crf.sequence_score(emissions, tags, mask).detach()
    assert float(score[0]) == pytest.approx(_score_by_hand(crf, emissions[0], [1, 0, 1]), abs=1e-5)
    assert float(score[1]) == pytest.approx(_score_by_hand(crf, emissions[1, :2], [0, 1]), abs=1e-5)
    # the model is a distribution: exp(-NLL) over all sequences of row 0 adds up to 1
    total = 0.0
    for seq in itertools.product(range(2), repeat=3):
        nll = crf.neg_log_likelihood(emissions[:1], torch.tensor([seq]), mask[:1])
        total += math.exp(-float(nll.detach()))
    assert total == pytest.approx(1.0, abs=1e-5)


def test_padding_content_changes_nothing():
    crf = _random_crf(4, 3)
    emissions, mask = _batch(3, C=4)
    noisy = emissions.clone()
    noisy[~mask] = 1e3
    assert torch.allclose(crf.log_partition(emissions, mask), crf.log_partition(noisy, mask))
    assert crf.decode(emissions, mask) == crf.decode(noisy, mask)
    tags = torch.randint(0, 4, mask.shape, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(crf.neg_log_likelihood(emissions, tags, mask), crf.neg_log_likelihood(noisy, tags, mask))


def test_gradients_reach_every_parameter_and_errors():
    crf = _random_crf(3, 0)
    emissions, mask = _batch(0)
    emissions.requires_grad_(True)
    tags = torch.zeros(mask.shape, dtype=torch.long)
    crf.neg_log_likelihood(emissions, tags, mask).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in crf.parameters())
    assert emissions.grad[~mask].abs().sum() == 0  # padding gets no gradient
    with pytest.raises(ValueError, match="starting with a real"):
        crf.log_partition(emissions.detach(), torch.zeros_like(mask))
    with pytest.raises(ValueError, match=r"\(B, T, 3\)"):
        crf.decode(torch.zeros(1, 2, 4), torch.ones(1, 2, dtype=torch.bool))


def test_learned_transitions_fix_what_emissions_cannot_tell():
    """Tags alternate 0,1,0,1… from a start tag given by the first emission; later emissions are
    noise, so only the transitions can get the later tags right."""
    torch.manual_seed(0)
    crf = CRF(2)
    opt = torch.optim.Adam(crf.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    for _ in range(60):
        first = torch.randint(0, 2, (16,), generator=g)
        tags = (first[:, None] + torch.arange(5)[None, :]) % 2  # (16, 5)
        emissions = torch.randn(16, 5, 2, generator=g) * 0.1
        emissions[:, 0] += torch.nn.functional.one_hot(first, 2) * 3.0
        loss = crf.neg_log_likelihood(emissions, tags, torch.ones(16, 5, dtype=torch.bool)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    emissions = torch.zeros(2, 5, 2)
    emissions[0, 0, 0] = emissions[1, 0, 1] = 3.0
    assert crf.decode(emissions, torch.ones(2, 5, dtype=torch.bool)) == [[0, 1, 0, 1, 0], [1, 0, 1, 0, 1]]


def test_doctests():
    assert doctest.testmod(crf_module).failed == 0
