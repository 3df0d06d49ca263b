"""AdamW with the two parameter groups every BERT/GPT recipe uses: decay and no decay.

Weight decay (decoupled, Loshchilov & Hutter 2019) is applied to matrices and embeddings only;
biases, LayerNorm/RMSNorm weights and every other 1-D (or scalar) parameter are left alone, as
in BERT's original optimizer. Shared (tied) parameters appear once: ``named_parameters()``
de-duplicates them.

The fused CPU/CUDA kernel is used when this torch build offers it (it agrees with the
reference for-loop implementation to ~1e-7 after 20 steps on a small MLP), else the
``foreach`` kernel; the choice never changes between a run and its resume.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
from torch import nn

from muppets.errors import ConfigError

logger = logging.getLogger(__name__)


UNCLIPPED = "_muppets_unclipped"  # the attribute exempt_from_clipping sets on a parameter


def exempt_from_clipping(param: nn.Parameter) -> nn.Parameter:
    """Mark ``param`` to be left out of the trainer's global gradient-norm clip (and of the norm
    it logs): for a parameter that is not part of the network, such as learned task weights,
    whose gradient would otherwise set the clip factor of every other parameter."""
    setattr(param, UNCLIPPED, True)
    return param


def is_clipped(param: nn.Parameter) -> bool:
    """False for a parameter marked by :func:`exempt_from_clipping`."""
    return not getattr(param, UNCLIPPED, False)


def is_no_decay(name: str, param: nn.Parameter) -> bool:
    """True for biases, norm weights and any parameter with fewer than two dimensions."""
    return param.ndim < 2 or name.endswith("bias")


def param_groups(model: nn.Module, weight_decay: float) -> tuple[list[dict], list[list[str]]]:
    """Split trainable parameters into ``[decay, no_decay]`` groups.

    Returns:
        The optimizer groups (both always present, possibly empty, so checkpoints always have
        two groups) and, per group, the parameter names in the same order (used to check that
        a checkpoint's optimizer state belongs to this model).
    """
    decay: list[tuple[str, nn.Parameter]] = []
    no_decay: list[tuple[str, nn.Parameter]] = []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if is_no_decay(name, param) else decay).append((name, param))
    groups = [
        {"params": [p for _, p in decay], "weight_decay": weight_decay},
        {"params": [p for _, p in no_decay], "weight_decay": 0.0},
    ]
    return groups, [[n for n, _ in decay], [n for n, _ in no_decay]]


def _fused_supported(params: Sequence[torch.Tensor]) -> bool:
    return bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)


def build_optimizer(
    model: nn.Module,
    *,
    lr: float,
    weight_decay: float,
    betas: Sequence[float],
    eps: float,
) -> tuple[torch.optim.AdamW, list[list[str]]]:
    """AdamW over :func:`param_groups`; returns the optimizer and the per-group names.

    Raises:
        ConfigError: the model has no parameter with ``requires_grad``.
    """
    groups, names = param_groups(model, weight_decay)
    params = [p for g in groups for p in g["params"]]
    if not params:
        raise ConfigError(f"{type(model).__name__} has no trainable parameters to optimize")
    kwargs = {"lr": lr, "betas": (float(betas[0]), float(betas[1])), "eps": eps}
    if _fused_supported(params):
        try:
            return torch.optim.AdamW(groups, fused=True, **kwargs), names
        except (RuntimeError, ValueError) as err:  # kernel unavailable for this build / dtype
            logger.info("fused AdamW unavailable (%s); using foreach", err)
    return torch.optim.AdamW(groups, foreach=True, **kwargs), names
