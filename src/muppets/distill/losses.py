"""The loss terms of distillation, each a SUM over its own units (the Trainer divides).

=============  ==========================================================  =====================
term           per unit                                                    units
=============  ==========================================================  =====================
``soft``       ``kl``: T² · KL(softmax(t/T) ‖ softmax(s/T)) (Hinton et al.  examples; tagging:
               2015: T² keeps the gradients' scale as T grows); ``mse``:   words (first pieces);
               the mean squared difference of the logits (Tang et al.      spans: windows (start
               2019); regression always ``mse``                            and end averaged)
``gold``       the task's own loss where a gold label exists               labelled units
``hidden``     mean over mapped layers of the squared difference of the    real tokens
               student state (projected to the teacher's width) and the
               teacher state, averaged over the width (TinyBERT)
``attention``  mean over mapped layers of KL(teacher ‖ student) of each    real query tokens
               query's attention distribution, heads averaged when the
               counts differ (MiniLM, TinyBERT)
=============  ==========================================================  =====================
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE = -100


def kl_rows(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """``T² · KL(softmax(t/T) ‖ softmax(s/T))`` over the last axis: ``(..., C) -> (...)``."""
    log_s = F.log_softmax(student.float() / temperature, dim=-1)
    log_t = F.log_softmax(teacher.float() / temperature, dim=-1)
    return (log_t.exp() * (log_t - log_s)).sum(-1) * temperature**2


def mse_rows(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """The mean squared difference over the last axis: ``(..., C) -> (...)``."""
    return (student.float() - teacher.float()).pow(2).mean(-1)


def soft_sum(kind: str, student: torch.Tensor, teacher: torch.Tensor, mode: str, temperature: float,
             token_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The soft-target loss summed over its units (see the module docstring).

    student, teacher: ``(B, C)`` classify/pair/choice, ``(B,)`` regress, ``(B, T, C)`` tag,
    ``(B, T, 2)`` span; ``token_mask`` ``(B, T)`` bool: the words (tag) or real tokens (span).
    """
    if kind == "regress":
        return (student.float() - teacher.float()).pow(2).sum()
    if kind == "span":  # a distribution over positions, for the start and for the end
        mask = token_mask[..., None]  # (B, T, 1)
        s = student.float().masked_fill(~mask, -1e4).transpose(1, 2)  # (B, 2, T)
        t = teacher.float().masked_fill(~mask, -1e4).transpose(1, 2)
        rows = kl_rows(s, t, temperature) if mode == "kl" else mse_rows(s * mask.transpose(1, 2), t * mask.transpose(1, 2))
        return rows.mean(-1).sum()  # (B, 2) -> windows
    rows = kl_rows(student, teacher, temperature) if mode == "kl" else mse_rows(student, teacher)  # (B,) or (B, T)
    if kind == "tag":
        return (rows * token_mask.float()).sum()
    return rows.sum()


def gold_sum(kind: str, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The task loss summed over the labelled units (``-100`` / NaN: no gold label)."""
    if kind == "regress":
        have = ~torch.isnan(labels)
        return (logits.float()[have] - labels[have]).pow(2).sum()
    if kind == "tag":
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.reshape(-1), ignore_index=IGNORE, reduction="sum")
    if kind == "span":
        have = labels[:, 0] != IGNORE
        if not bool(have.any()):
            return logits.sum() * 0.0
        T = logits.shape[1]
        start, end = labels[have, 0].clamp(0, T - 1), labels[have, 1].clamp(0, T - 1)
        lg = logits[have].float()
        return 0.5 * (F.cross_entropy(lg[..., 0], start, reduction="sum") + F.cross_entropy(lg[..., 1], end, reduction="sum"))
    return F.cross_entropy(logits.float(), labels, ignore_index=IGNORE, reduction="sum")


def gold_units(kind: str, labels: torch.Tensor) -> float:
    """How many units :func:`gold_sum` sums over."""
    if kind == "regress":
        return float((~torch.isnan(labels)).sum())
    if kind == "span":
        return float((labels[:, 0] != IGNORE).sum())
    return float((labels != IGNORE).sum())


def hidden_sum(student: list[torch.Tensor], teacher: list[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
    """Mapped layer pairs (student already projected) ``(B, T, H_t)`` each, ``mask`` ``(B, T)``:
    the mean over pairs of the width-averaged squared difference, summed over real tokens."""
    per_token = torch.stack([(s.float() - t.float()).pow(2).mean(-1) for s, t in zip(student, teacher)]).mean(0)
    return (per_token * mask.float()).sum()


def attention_sum(student: list[torch.Tensor], teacher: list[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
    """Mapped attention maps ``(B, heads, T, T)`` (probabilities): the mean over pairs and heads
    of KL(teacher ‖ student) per query row, summed over the real query tokens (``mask`` ``(B, T)``).
    Where the head counts differ, both sides are first averaged over their heads."""
    terms = []
    for s, t in zip(student, teacher):
        if s.shape[1] != t.shape[1]:
            s, t = s.mean(1, keepdim=True), t.mean(1, keepdim=True)
        t = t.float()
        kl = torch.xlogy(t, t) - torch.xlogy(t, s.float().clamp(min=1e-12))  # (B, heads, T, T)
        terms.append(kl.sum(-1).mean(1))  # (B, T)
    return (torch.stack(terms).mean(0) * mask.float()).sum()
