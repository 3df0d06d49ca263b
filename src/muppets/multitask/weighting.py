"""Task weights of joint multi-task training: ``total = Σ_k w_k · L_k``.

* ``fixed`` — the configured weights (all 1 by default: the plain sum of the task losses).
* ``uncertainty`` — Kendall, Gal & Cipolla (2018): a learned log-variance ``s_k`` per task and
  ``Σ_k exp(-s_k) · L_k + s_k``; at the optimum ``exp(-s_k) = 1 / L_k``, so a task with a large
  (noisy, or slowly falling) loss is down-weighted. Both of the paper's forms (½·exp(-s)·L + ½·s
  in LibMTL's reading) settle at ``w_k = 1 / (2 L_k)``; this one is twice that for every task
  kind, the same relative weighting, and every weight starts at 1 as with ``fixed``.
* ``gradnorm`` — Chen et al. (2018): weights ``w = K · softmax(θ)`` (positive, summing to K: the
  paper's renormalisation, built in), trained on their own loss
  ``Σ_k |G_k - mean(G) · r_k^α|`` where ``G_k = ||∇_W w_k L_k||`` is the gradient norm of the
  weighted task loss at the last shared layer ``W`` and ``r_k = (L_k / L_k(0)) / mean_j(L_j / L_j(0))``
  its relative inverse training rate; the target is a constant, and the task losses see the
  weights as constants (only the GradNorm loss moves them).
* ``dwa`` — Dynamic Weight Average (Liu, Johns & Davison 2019):
  ``w_k = K · softmax_k(r_k / T)`` with ``r_k = L̄_k(t-1) / L̄_k(t-2)``, the ratio of the task's
  mean loss over the last two windows (an epoch by default); 1 until two windows exist.

**Under the Trainer's contract** (:mod:`muppets.train.trainer`): a task's term is ``w_k`` times
its loss SUM, which the trainer divides by the task's units, so an update is
``Σ_k w_k · mean_k`` whatever the accumulation or world size. The regulariser of ``uncertainty``
(``Σ s_k``) and GradNorm's gradient are one extra term, ``"weighting"``, counted once per
micro-batch (the data's normaliser is 1 per micro-batch): the trainer's division turns its sum
into the per-step value. GradNorm's term has the value 0 and the gradient of the GradNorm loss
with respect to θ (``(θ·g).sum() - (θ·g).sum().detach()``), so the logged loss stays the task
losses'. GradNorm reads each micro-batch's own mean task losses; DWA's window means are
summed over every micro-batch and rank (loss sums over units), so they do not depend on how a
step is split.

**One learning rate.** The trainer has one peak learning rate, sized for the encoder (5e-5);
the learned weights need a far larger step. Adam's update is invariant to the scale of a
gradient, so a weight parameter stored as ``raw = s / scale`` with ``scale = weight_lr / lr``
moves ``s`` by about ``weight_lr`` per step (times the schedule) with the shared optimizer.
1-D parameters get no weight decay (:mod:`muppets.train.optim`). ``raw`` is left out of the
trainer's gradient clip (:func:`~muppets.train.optim.exempt_from_clipping`): its gradient is
``scale`` times that of ``s``, and clipped together with the network's it would set the clip
factor of the whole model, shrinking the encoder's gradients towards Adam's ε.

The state (``raw``, the initial losses of GradNorm, DWA's windows) lives in parameters and
buffers, so checkpoints carry it and a resumed run continues exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from muppets.errors import ConfigError
from muppets.train.distributed import all_reduce_sum
from muppets.train.optim import exempt_from_clipping

WEIGHTINGS = ("fixed", "uncertainty", "gradnorm", "dwa")
ADAPTIVE = ("uncertainty", "gradnorm", "dwa")


class TaskWeighting(nn.Module):
    """Combines the task loss sums of a step into the Trainer's terms (see the module docstring).

    Args:
        names: the tasks, in order.
        method: one of :data:`WEIGHTINGS`.
        fixed: the ``fixed`` weights (``[]`` = all 1); also the starting point of nothing else.
        lr: the run's peak learning rate; ``weight_lr``: the learned weights' step size.
        alpha: GradNorm's asymmetry α (1.5 in the paper's NYUv2 runs).
        temperature: DWA's T (2 in the paper).
        window: DWA's window in micro-batches (an epoch of steps × accumulation).
    """

    def __init__(self, names: Sequence[str], method: str = "fixed", fixed: Sequence[float] = (),
                 lr: float = 5e-5, weight_lr: float = 0.025, alpha: float = 1.5,
                 temperature: float = 2.0, window: int = 1) -> None:
        super().__init__()
        if method not in WEIGHTINGS:
            raise ConfigError(f"weighting {method!r}: expected one of {WEIGHTINGS}")
        K = len(names)
        fixed = list(fixed) or [1.0] * K
        if len(fixed) != K or any(w < 0 for w in fixed):
            raise ConfigError(f"fixed task weights {fixed}: need {K} non-negative numbers")
        if method in ("uncertainty", "gradnorm") and (lr <= 0 or weight_lr <= 0):
            raise ConfigError(f"weighting {method}: lr={lr} and weight_lr={weight_lr} must be > 0")
        if method == "dwa" and (temperature <= 0 or window < 1):
            raise ConfigError(f"dwa: temperature={temperature} must be > 0, window={window} >= 1")
        self.names, self.method = list(names), method
        self.alpha, self.temperature, self.window = alpha, temperature, window
        self.scale = weight_lr / lr if method in ("uncertainty", "gradnorm") else 1.0
        self.register_buffer("fixed", torch.tensor(fixed, dtype=torch.float32))
        if method in ("uncertainty", "gradnorm"):
            self.raw = exempt_from_clipping(nn.Parameter(torch.zeros(K)))  # s_k (uncertainty) or θ_k (gradnorm), / scale
        if method == "gradnorm":
            self.register_buffer("initial", torch.zeros(K))  # L_k(0); 0 = not seen yet
        if method == "dwa":
            self.register_buffer("window_sum", torch.zeros(K, dtype=torch.float64))
            self.register_buffer("window_count", torch.zeros(K, dtype=torch.float64))
            self.register_buffer("history", torch.zeros(2, K, dtype=torch.float64))  # [t-2, t-1] means
            self.register_buffer("windows_done", torch.zeros((), dtype=torch.long))
            self.register_buffer("micro_batches", torch.zeros((), dtype=torch.long))

    @property
    def adds_term(self) -> bool:
        """True when the combination has the extra ``"weighting"`` term."""
        return self.method in ("uncertainty", "gradnorm")

    def weights(self) -> torch.Tensor:
        """``(K,)`` the current task weights (detached)."""
        with torch.no_grad():
            if self.method == "uncertainty":
                return torch.exp(-self.scale * self.raw.float())
            if self.method == "gradnorm":
                return len(self.names) * torch.softmax(self.scale * self.raw.float(), 0)
            if self.method == "dwa":
                return self._dwa_weights()
            return self.fixed.clone()

    def _dwa_weights(self) -> torch.Tensor:
        K = len(self.names)
        if int(self.windows_done) < 2:
            return torch.ones(K)
        ratio = self.history[1] / self.history[0].clamp(min=1e-12)
        return (K * torch.softmax(ratio / self.temperature, 0)).float()

    def combine(self, sums: dict[str, torch.Tensor], units: dict[str, float],
                shared: nn.Parameter | None = None) -> dict[str, torch.Tensor]:
        """The Trainer's terms for one micro-batch: ``{"task:<name>": w_k · sum_k}`` for the
        tasks present (plus ``"weighting"`` for uncertainty / GradNorm). ``units`` are each
        task's units in this micro-batch; ``shared`` is GradNorm's ``W``."""
        index = {name: self.names.index(name) for name in sums}
        out: dict[str, torch.Tensor] = {}
        if self.method == "uncertainty":
            s = self.scale * self.raw
            for name, total in sums.items():
                out[f"task:{name}"] = torch.exp(-s[index[name]]) * total
            out["weighting"] = s[list(index.values())].sum()
            return out
        if self.method == "gradnorm":
            return self._gradnorm(sums, units, index, shared)
        w = self.weights().to(next(iter(sums.values())).device) if self.method == "dwa" else self.fixed
        if self.method == "dwa" and self.training:
            self._dwa_observe(sums, units, index)
        return {f"task:{name}": w[index[name]] * total for name, total in sums.items()}

    def _dwa_observe(self, sums: dict[str, torch.Tensor], units: dict[str, float], index: dict[str, int]) -> None:
        """Add this micro-batch's task loss sums and units to the window; close it when it is
        full (the window's mean loss is Σ sums / Σ units over every rank, whatever the split
        into micro-batches)."""
        with torch.no_grad():
            for name, total in sums.items():
                self.window_sum[index[name]] += float(total.detach())
                self.window_count[index[name]] += units[name]
            self.micro_batches += 1
            if int(self.micro_batches) % self.window == 0:
                both = all_reduce_sum(torch.stack([self.window_sum, self.window_count]))
                mean = both[0] / both[1].clamp(min=1)
                self.history.copy_(torch.stack([self.history[1], mean]))
                self.windows_done += 1
                self.window_sum.zero_()
                self.window_count.zero_()

    def _gradnorm(self, sums: dict[str, torch.Tensor], units: dict[str, float], index: dict[str, int],
                  shared: nn.Parameter | None) -> dict[str, torch.Tensor]:
        """Detached weights on the task terms; the GradNorm loss's gradient on θ as the extra term."""
        K = len(self.names)
        w = K * torch.softmax(self.scale * self.raw, 0)  # (K,) with a graph to raw
        out = {f"task:{name}": w[index[name]].detach() * total for name, total in sums.items()}
        if not self.training or shared is None:
            out["weighting"] = (self.raw * 0.0).sum()
            return out
        present = list(index.values())
        means = [sums[name] / max(units[name], 1.0) for name in sums]
        norms = []
        for name, mean in zip(sums, means):  # G_k / w_k = ||∇_W L_k||
            (grad,) = torch.autograd.grad(mean, shared, retain_graph=True, allow_unused=True)
            if grad is None:
                raise ConfigError(f"gradnorm: task {name!r} does not reach the shared layer it "
                                  "normalises; every task must use the shared encoder's last layer")
            norms.append(torch.linalg.vector_norm(grad.float()))
        losses = torch.stack([m.detach().float() for m in means])
        with torch.no_grad():
            unseen = self.initial[present] == 0
            self.initial[present] = torch.where(unseen, losses.to(self.initial.dtype), self.initial[present])
        G = w[present] * torch.stack(norms).detach()  # (K',) graph to raw through w only
        ratio = losses / self.initial[present].clamp(min=1e-12)
        r = ratio / ratio.mean()
        target = (G.mean() * r ** self.alpha).detach()
        grad_loss = (G - target).abs().sum()
        (g_raw,) = torch.autograd.grad(grad_loss, self.raw, retain_graph=True)
        surrogate = (self.raw * g_raw.detach()).sum()
        out["weighting"] = surrogate - surrogate.detach()
        return out
