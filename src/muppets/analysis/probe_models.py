"""The probes and their training loop: small models on frozen vectors, stopped early on dev.

* :class:`WordProbe` — one layer's vector ``(B, D)`` -> label logits: a linear softmax
  classifier (``hidden=0``, the probe of Tenney et al. 2019b and Hewitt & Liang 2019's
  "linear") or one hidden ReLU layer (their "MLP-1");
* :class:`MixProbe` — Tenney et al. 2019a's scalar-mix probe: the ``K`` layers mixed by
  ``γ · Σ_k softmax(w)_k · h_k`` (:class:`~muppets.nn.scalar_mix.ScalarMix`), then the same
  classifier; the learned ``s = softmax(w)`` says which layers the task draws on, and
  :func:`expected_layer` is their centre of gravity ``E[l] = Σ_l l · s_l``;
  :func:`differential_expected_layer` is their second measure, from cumulative scoring: the
  gain ``Δ(l)`` of a mix over layers ``0..l`` against one over ``0..l-1``, and
  ``E_Δ[l] = Σ_l l · Δ(l) / Σ_l Δ(l)``;
* :func:`fit_logistic` — the linear probe as a convex problem solved to its optimum
  (L2-regularised logistic regression, scikit-learn's objective, by L-BFGS); the probes choose
  its ``C`` among :data:`LOGISTIC_C` on dev;
* :func:`train_early_stopping` — Adam, one pass over shuffled batches per epoch, a dev score
  after each epoch; the best state is kept and training stops after ``patience`` epochs
  without improvement (optionally dividing the learning rate by 10 at each, as Hewitt &
  Manning's structural probe does).
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from muppets.errors import ConfigError
from muppets.nn.scalar_mix import ScalarMix

log = logging.getLogger(__name__)

PROBE_KINDS = ("linear", "mlp", "logistic")
LOGISTIC_C = (1e-3, 1e-2, 0.1, 1.0, 10.0)  # the inverse L2 strengths a logistic probe chooses among


def expected_layer(weights: Sequence[float], layers: Sequence[int] | None = None) -> float:
    """Tenney et al. (2019a) "expected layer": ``Σ_l l · s_l`` over the mixed layers (their
    numbers, 0 = the embedding layer) and normalised mix weights ``s``.

    >>> expected_layer([0.25, 0.5, 0.25]), expected_layer([0.0, 0.0, 1.0]), expected_layer([0.5, 0.5], [2, 6])
    (1.0, 2.0, 4.0)
    """
    layers = list(range(len(weights))) if layers is None else list(layers)
    if len(layers) != len(weights) or not weights:
        raise ConfigError(f"expected_layer: {len(weights)} weights for {len(layers)} layers")
    total = float(sum(weights))
    if not math.isclose(total, 1.0, abs_tol=1e-4):
        raise ConfigError(f"expected_layer: the mix weights sum to {total}, not 1")
    return float(sum(l * s for l, s in zip(layers, weights)))


def differential_expected_layer(scores: Sequence[float], layers: Sequence[int] | None = None) -> dict:
    """Tenney et al. (2019a) cumulative scoring: ``scores[i]`` is the score of a probe on the
    layers ``layers[0..i]`` (the first one alone); the differential scores are
    ``Δ(l_i) = scores[i] - scores[i-1]`` for ``i >= 1`` and the expected layer is
    ``E_Δ[l] = Σ_i l_i · Δ(l_i) / Σ_i Δ(l_i)``: where, above the lowest layer, the task's gain
    comes from. A negative ``Δ`` (a probe that did worse with one more layer) is kept, as in the
    paper; when the total gain is not positive the expected layer is undefined (``nan``).

    >>> r = differential_expected_layer([0.5, 0.7, 0.8, 0.8])
    >>> [round(d, 6) for d in r["delta"]], round(r["expected_layer"], 6)
    ([0.2, 0.1, 0.0], 1.333333)
    >>> differential_expected_layer([0.5, 0.6], [2, 6])["expected_layer"]
    6.0
    """
    layers = list(range(len(scores))) if layers is None else list(layers)
    if len(layers) != len(scores) or len(scores) < 2:
        raise ConfigError(f"differential_expected_layer: {len(scores)} scores for {len(layers)} layers "
                          "(at least two needed)")
    delta = [float(b - a) for a, b in zip(scores[:-1], scores[1:])]
    total = sum(delta)
    value = sum(l * d for l, d in zip(layers[1:], delta)) / total if total > 0 else float("nan")
    return {"layers": layers, "scores": [float(s) for s in scores], "delta": delta, "expected_layer": float(value)}


class WordProbe(nn.Module):
    """``(B, D)`` -> ``(B, C)`` logits: linear (``hidden=0``) or ``Linear-ReLU-Dropout-Linear``."""

    def __init__(self, dim: int, num_labels: int, hidden: int = 0, dropout: float = 0.0) -> None:
        super().__init__()
        if hidden < 0 or num_labels < 1:
            raise ConfigError(f"probe: hidden={hidden} and num_labels={num_labels} must be >= 0 / >= 1")
        self.net = nn.Linear(dim, num_labels) if hidden == 0 else nn.Sequential(
            nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, num_labels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class MixProbe(nn.Module):
    """``(B, K, D)`` -> ``(B, C)``: :class:`ScalarMix` over the ``K`` layers, then a
    :class:`WordProbe`. With ``K = 1`` the mix is the identity (one layer)."""

    def __init__(self, num_layers: int, dim: int, num_labels: int, hidden: int = 0, dropout: float = 0.0) -> None:
        super().__init__()
        self.mix = ScalarMix(num_layers) if num_layers > 1 else None
        self.probe = WordProbe(dim, num_labels, hidden, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x[:, 0] if self.mix is None else self.mix(list(x.unbind(1)))  # (B, D)
        return self.probe(h)

    def mix_weights(self) -> list[float]:
        return [1.0] if self.mix is None else self.mix.weights()

    def gamma(self) -> float:
        return 1.0 if self.mix is None else self.mix.gamma_value()


def make_probe(kind: str, num_layers: int, dim: int, num_labels: int, hidden: int, dropout: float) -> MixProbe:
    """A :class:`MixProbe` of ``kind`` (``linear`` ignores ``hidden`` and ``dropout``; a mix of
    ``logistic`` probes is trained as ``linear``: the mix weights make it non-convex)."""
    if kind not in PROBE_KINDS:
        raise ConfigError(f"probe {kind!r} is not one of {', '.join(PROBE_KINDS)}")
    if kind == "mlp" and hidden < 1:
        raise ConfigError(f"probe=mlp needs hidden >= 1, got {hidden}")
    return MixProbe(num_layers, dim, num_labels, hidden if kind == "mlp" else 0, dropout if kind == "mlp" else 0.0)


@dataclass
class LogisticFit:
    """What :func:`fit_logistic` reports: L-BFGS iterations, the final gradient's largest entry
    (of the objective divided by ``C · N``) and whether it is below ``converged_below``."""

    iterations: int
    gradient: float
    converged: bool


# L-BFGS also stops when one iteration changes the loss by less than this: scikit-learn's second
# rule for the same solver (scipy's ftol, 64 float64 epsilons relative to max(|loss|, 1)); the
# loss here is a mean, mostly below 1, so the absolute threshold torch takes is about the same.
_LOSS_CHANGE = 64 * torch.finfo(torch.float64).eps


def fit_logistic(x: torch.Tensor, y: torch.Tensor, num_labels: int, c: float, max_iter: int = 5000,
                 tolerance: float = 1e-6, converged_below: float = 1e-6) -> tuple[WordProbe, LogisticFit]:
    """A linear softmax probe at the optimum of L2-regularised logistic regression.

    It minimises ``C · Σ_i CE(x_i, y_i) + ½ ‖W‖²`` (the bias not penalised), the objective of
    scikit-learn's ``LogisticRegression(C=c)``, in float64 by full-batch L-BFGS with a strong
    Wolfe line search (float32 stalls above the tolerance on correlated features). The objective
    is divided by ``C · N`` so the tolerance does not depend on N. Only the labels seen in ``y``
    are fitted, as scikit-learn does: a label absent from train would send its unpenalised bias
    to −∞; its row is left at zero weight and a bias of −1e4. With two such labels it fits, as
    scikit-learn does, one weight vector ``w`` and bias ``b`` of the logit difference (binary
    logistic loss, penalty ``½ ‖w‖²``), which costs one matrix-vector product each way per
    evaluation instead of a two-column product; the probe's two rows are then ``±w/2`` and
    ``±b/2``, the same softmax probabilities. L-BFGS runs until the gradient's largest entry is
    below ``tolerance`` or an iteration changes the loss by less than 64 float64 epsilons
    (scikit-learn's rule for the same solver); a fit whose gradient is still above
    ``converged_below`` is flagged and logged. A tighter tolerance mostly buys iterations: at
    large C, L-BFGS can spend thousands of them between 1e-6 and 1e-7 (BENCHMARKS.md, the
    logistic solver against scikit-learn). Returns the probe (float32, eval mode) and
    how the fit ended.

    Args:
        x: ``(N, D)`` features; y: ``(N,)`` label ids below ``num_labels``.
    """
    if c <= 0:
        raise ConfigError(f"logistic probe: C={c} must be positive")
    n, dim = x.shape
    present = torch.unique(y)  # (P,) sorted label ids seen in train
    remap = torch.full((num_labels,), -1, dtype=torch.long)
    remap[present] = torch.arange(len(present))
    binary = len(present) == 2
    inner = nn.Linear(dim, 1 if binary else len(present)).double()
    with torch.no_grad():
        inner.weight.zero_()
        inner.bias.zero_()
    x64, target = x.double(), remap[y]
    optimizer = torch.optim.LBFGS(inner.parameters(), lr=1.0, max_iter=max_iter, tolerance_grad=tolerance,
                                  tolerance_change=_LOSS_CHANGE, history_size=20, line_search_fn="strong_wolfe")

    def objective() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        if binary:  # the logit of the second present label over the first: (N,)
            data = nn.functional.binary_cross_entropy_with_logits(inner(x64)[:, 0], target.double())
        else:
            data = nn.functional.cross_entropy(inner(x64), target)
        loss = data + inner.weight.pow(2).sum() / (2 * c * n)
        loss.backward()
        return loss

    optimizer.step(objective)
    objective()
    gradient = max(float(p.grad.abs().max()) for p in inner.parameters())
    fit = LogisticFit(int(optimizer.state[inner.weight]["n_iter"]), gradient, gradient <= converged_below)
    if not fit.converged:
        log.warning("logistic probe (C=%g, %d examples): stopped after %d L-BFGS iterations with gradient %.2e > %.0e",
                    c, n, fit.iterations, gradient, converged_below)
    probe = WordProbe(dim, num_labels)
    with torch.no_grad():
        probe.net.weight.zero_()
        probe.net.bias.fill_(-1e4)
        if binary:
            sign = torch.tensor([[-0.5], [0.5]], dtype=torch.float64)  # (2, 1): rows −w/2, +w/2
            probe.net.weight[present] = (sign * inner.weight).float()
            probe.net.bias[present] = (sign[:, 0] * inner.bias).float()
        else:
            probe.net.weight[present] = inner.weight.float()
            probe.net.bias[present] = inner.bias.float()
    return probe.eval(), fit


@dataclass
class Stopping:
    """How a probe trains: Adam's ``lr`` and ``weight_decay``, at most ``max_epochs`` epochs,
    stop after ``patience`` epochs without a better dev score; ``lr_decay`` divides the
    learning rate by 10 at each of those epochs. ``mix_lr``: Adam moves a parameter by about
    its learning rate per step, so at ``lr = 1e-3`` the ``K`` mix logits need thousands of
    steps to leave their uniform start; a larger rate for them lets a mix settle on a small
    training set too."""

    lr: float = 1e-3
    weight_decay: float = 0.0
    max_epochs: int = 20
    patience: int = 3
    lr_decay: bool = False
    mix_lr: float | None = None  # a MixProbe's mix logits and γ (None: lr); no weight decay on them

    def __post_init__(self) -> None:
        if self.max_epochs < 1 or self.patience < 1 or self.lr <= 0:
            raise ConfigError(f"probe training: max_epochs={self.max_epochs}, patience={self.patience} "
                              f"and lr={self.lr} must be positive")


@dataclass
class Fitted:
    """What :func:`train_early_stopping` reports: epochs run, the best epoch (1-based) and its dev score."""

    epochs: int
    best_epoch: int
    dev_score: float


def _param_groups(probe: nn.Module, stopping: Stopping) -> list[dict]:
    mix = getattr(probe, "mix", None)
    if mix is None or stopping.mix_lr is None:
        return [{"params": list(probe.parameters())}]
    mixed = {id(p) for p in mix.parameters()}
    rest = [p for p in probe.parameters() if id(p) not in mixed]
    return [{"params": rest}, {"params": list(mix.parameters()), "lr": stopping.mix_lr, "weight_decay": 0.0}]


def train_early_stopping(probe: nn.Module, losses: Callable[[torch.Generator], Iterable[torch.Tensor]],
                         dev_score: Callable[[], float], stopping: Stopping, seed: int) -> Fitted:
    """Train ``probe`` on the batches' ``losses(generator)`` (one epoch per call; the generator
    shuffles) and keep the state with the highest ``dev_score()`` (run in eval mode, no grad)."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(_param_groups(probe, stopping), lr=stopping.lr, weight_decay=stopping.weight_decay)
    best, best_state, best_epoch, waited, epoch = -math.inf, None, 0, 0, 0
    for epoch in range(1, stopping.max_epochs + 1):
        probe.train()
        for loss in losses(generator):
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        probe.eval()
        with torch.no_grad():
            score = float(dev_score())
        score = -math.inf if math.isnan(score) else score
        if best_epoch == 0 or score > best:  # a NaN score never beats a real one
            best, best_state, best_epoch, waited = score, copy.deepcopy(probe.state_dict()), epoch, 0
            continue
        waited += 1
        if waited >= stopping.patience:
            break
        if stopping.lr_decay:
            for group in optimizer.param_groups:
                group["lr"] *= 0.1
    assert best_state is not None
    probe.load_state_dict(best_state)
    probe.eval()
    return Fitted(epoch, best_epoch, best)
