"""LF analysis of a label matrix, with the definitions of Snorkel's ``LFAnalysis.lf_summary``
(so the numbers are identical on the same matrix; ``tests/test_weak_analysis.py`` checks it):

=============  ==================================================================================
polarity       the sorted distinct non-abstain labels LF ``j`` emits
coverage       fraction of the ``n`` rows where LF ``j`` votes
overlaps       fraction of rows where LF ``j`` votes and at least one other LF votes
conflicts      fraction of rows where LF ``j`` votes and the row holds two different votes
               (not necessarily LF ``j``'s: a row is conflicted or not, as in Snorkel)
correct        with gold ``Y``: rows where LF ``j`` votes ``Y[i]`` (``Y[i] != -1``)
incorrect      rows where LF ``j`` votes and ``Y[i] != -1`` and the vote differs
emp. accuracy  ``0.5 * ((#agree - #disagree) / #votes + 1)``, where a vote on a row with
               ``Y[i] = -1`` counts as a disagreement (Snorkel's formula); 0 if LF ``j`` never
               votes
=============  ==================================================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from muppets.config import atomic_path
from muppets.errors import ConfigError
from muppets.weak.matrix import check_label_matrix, check_gold

__all__ = ["LFSummary", "lf_summary", "plot_lf_summary"]


@dataclass
class LFSummary:
    """One row per LF; ``correct``/``incorrect``/``emp_accuracy`` are None without gold."""

    names: list[str]
    polarity: list[list[int]]
    coverage: np.ndarray  # (m,) float64
    overlaps: np.ndarray  # (m,) float64
    conflicts: np.ndarray  # (m,) float64
    correct: np.ndarray | None = None  # (m,) int64
    incorrect: np.ndarray | None = None  # (m,) int64
    emp_accuracy: np.ndarray | None = None  # (m,) float64

    def rows(self) -> list[dict[str, object]]:
        """The table as JSON-ready dicts, one per LF."""
        out = []
        for j, name in enumerate(self.names):
            row: dict[str, object] = {
                "lf": name, "polarity": self.polarity[j], "coverage": float(self.coverage[j]),
                "overlaps": float(self.overlaps[j]), "conflicts": float(self.conflicts[j])}
            if self.correct is not None:
                row.update(correct=int(self.correct[j]), incorrect=int(self.incorrect[j]),
                           emp_accuracy=float(self.emp_accuracy[j]))
            out.append(row)
        return out

    def format(self, class_names: Sequence[str] | None = None) -> str:
        """A plain-text table; coverage, overlaps, conflicts and accuracy as fractions, as
        Snorkel's ``lf_summary`` and every score of muppets; ``class_names`` names the classes
        in the polarity column (``[spam]`` rather than ``[1]``)."""
        gold = self.correct is not None
        head = ["lf", "polarity", "coverage", "overlaps", "conflicts"]
        head += ["correct", "incorrect", "emp.acc"] if gold else []
        body = []
        for j, row in enumerate(self.rows()):
            polarity = self.polarity[j] if class_names is None else [_class_name(class_names, k) for k in self.polarity[j]]
            cells = [str(row["lf"]), "[" + ", ".join(map(str, polarity)) + "]"]
            cells += [f"{row[k]:.3f}" for k in ("coverage", "overlaps", "conflicts")]
            if gold:
                cells += [str(row["correct"]), str(row["incorrect"]),
                          f"{row['emp_accuracy']:.3f}"]
            body.append(cells)
        widths = [max(len(r[c]) for r in [head, *body]) for c in range(len(head))]
        lines = ["  ".join(cell.ljust(w) if c < 2 else cell.rjust(w)
                           for c, (cell, w) in enumerate(zip(r, widths))) for r in [head, *body]]
        return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def _class_name(names: Sequence[str], k: int) -> str:
    return names[k] if 0 <= k < len(names) else str(k)


def _row_flags(L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: overlapped (>= 2 votes) and conflicted (>= 2 distinct votes)."""
    voted = L != -1
    overlapped = voted.sum(axis=1) > 1
    high = np.where(voted, L, np.iinfo(np.int64).min).max(axis=1, initial=np.iinfo(np.int64).min)
    low = np.where(voted, L, np.iinfo(np.int64).max).min(axis=1, initial=np.iinfo(np.int64).max)
    return overlapped, voted.any(axis=1) & (high != low)


def _gold_columns(L: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    voted = L != -1
    agree = voted & (L == Y[:, None])
    scored = voted & (Y[:, None] != -1)
    correct = agree.sum(axis=0)
    incorrect = scored.sum(axis=0) - correct
    signed = agree.sum(axis=0) - (voted & ~agree).sum(axis=0)  # Snorkel's +1 / -1 / 0 sum
    with np.errstate(divide="ignore", invalid="ignore"):
        acc = np.nan_to_num(0.5 * (signed / voted.sum(axis=0) + 1))
    return correct.astype(np.int64), incorrect.astype(np.int64), acc


def lf_summary(L: np.ndarray, Y: np.ndarray | None = None,
               names: list[str] | None = None) -> LFSummary:
    """Polarity, coverage, overlaps, conflicts (and with gold ``Y``: correct, incorrect,
    empirical accuracy) of each column of ``L`` (n, m); see the module docstring.

    >>> L = np.array([[-1, 0, 0], [-1, -1, -1], [1, 0, -1], [-1, 0, -1], [0, 0, 0]])
    >>> s = lf_summary(L)
    >>> s.coverage.tolist(), s.conflicts.tolist(), s.polarity
    ([0.4, 0.8, 0.4], [0.2, 0.2, 0.0], [[0, 1], [0], [0]])
    """
    L = check_label_matrix(L)
    n, m = L.shape
    if n == 0:
        raise ConfigError("lf_summary: the label matrix has no rows")
    names = [str(j) for j in range(m)] if names is None else list(names)
    if len(names) != m:
        raise ConfigError(f"lf_summary: {len(names)} names for {m} LF columns")
    voted = L != -1
    overlapped, conflicted = _row_flags(L)
    summary = LFSummary(
        names, [sorted(int(v) for v in np.unique(L[voted[:, j], j])) for j in range(m)],
        voted.sum(axis=0) / n, (voted & overlapped[:, None]).sum(axis=0) / n,
        (voted & conflicted[:, None]).sum(axis=0) / n)
    if Y is not None:
        Y = check_gold(Y, n)
        summary.correct, summary.incorrect, summary.emp_accuracy = _gold_columns(L, Y)
    return summary


def plot_lf_summary(summary: LFSummary, path: str | Path, title: str = "") -> Path:
    """Grouped bars per LF (coverage, overlaps, conflicts, and empirical accuracy when gold
    was given) written to ``path`` as a PNG, atomically. Returns the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    series = {"coverage": summary.coverage, "overlaps": summary.overlaps,
              "conflicts": summary.conflicts}
    if summary.emp_accuracy is not None:
        series["emp. accuracy"] = summary.emp_accuracy
    m = len(summary.names)
    fig = Figure(figsize=(max(5.0, 0.9 * m + 2), 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    width = 0.8 / len(series)
    for k, (label, values) in enumerate(series.items()):
        ax.bar(np.arange(m) + (k - (len(series) - 1) / 2) * width, values, width, label=label)
    ax.set_xticks(range(m), summary.names, rotation=30, ha="right")
    ax.set_ylim(0, 1.25)  # room for the legend above the bars
    ax.set_ylabel("fraction")
    ax.legend(fontsize=8, ncols=len(series), loc="upper center")
    if title:
        ax.set_title(title)
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    return path
