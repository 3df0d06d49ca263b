"""Attention as PNG files (matplotlib on an Agg canvas; no pyplot, no global backend change).

* :func:`save_head_png`: one head of one layer, as the page's head view draws it (``lines``:
  tokens twice, a line per (from, to) pair, opacity = attention) or as a ``heatmap``
  (bertviz #13 asked for saving views as images);
* :func:`plot_shares`: Clark et al. 2019's Fig. 2 — per layer, every head's share of attention
  on the first token, on ``[SEP]`` and on punctuation (dots), and the layer mean (line);
* :func:`plot_pronoun`: the attention from a pronoun to each candidate noun per layer (the
  strongest head and the mean over heads).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from muppets.analysis.attention import FIRST_LAYER, AttentionView, PronounAttention
from muppets.analysis.attention_page import HEAD_COLORS, SEGMENT_COLORS  # a PNG and the page agree
from muppets.errors import ConfigError

PNG_KINDS = ("lines", "heatmap")


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: str | Path, dpi: int = 120) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format="png")  # at the path given: matplotlib would add .png to a bare name
    return path


def save_head_png(view: AttentionView, layer: int, head: int, path: str | Path, kind: str = "lines") -> Path:
    """Write layer ``layer``'s head ``head`` of ``view`` as a PNG (layers from 1, heads from 0:
    :mod:`muppets.analysis.attention`); returns the path."""
    view.check_head(layer, head)
    if kind not in PNG_KINDS:
        raise ConfigError(f"PNG kind {kind!r}: choose one of {', '.join(PNG_KINDS)}")
    weights = view.head(layer, head)  # (T, T): from, to
    fig = _draw_lines(view, weights, HEAD_COLORS[head % len(HEAD_COLORS)]) if kind == "lines" \
        else _draw_heatmap(view, weights)
    fig.suptitle(f"{view.model or 'model'}: layer {layer}, head {head}", fontsize=10)
    return _save(fig, path)


def _draw_lines(view: AttentionView, weights: np.ndarray, color: str):
    from matplotlib.collections import LineCollection

    T = len(view.tokens)
    fig = _figure(4.5, 0.8 + 0.22 * T)
    ax = fig.add_subplot()
    y = np.arange(T)[::-1].astype(float)  # token 0 at the top
    i, j = np.nonzero(weights >= 0.01)
    segments = np.stack([np.stack([np.zeros_like(i), y[i]], -1), np.stack([np.ones_like(j), y[j]], -1)], 1)
    colors = np.zeros((len(i), 4))
    colors[:, :3] = _rgb(color)
    colors[:, 3] = weights[i, j]
    ax.add_collection(LineCollection(segments, colors=colors, linewidths=1.6))
    for k, token in enumerate(view.tokens):
        color = SEGMENT_COLORS[view.segments[k]]
        ax.text(-0.04, y[k], token, ha="right", va="center", fontsize=8, color=color)
        ax.text(1.04, y[k], token, ha="left", va="center", fontsize=8, color=color)
    ax.set_xlim(-0.8, 1.8)
    ax.set_ylim(-0.7, T - 0.3)
    ax.axis("off")
    return fig


def _draw_heatmap(view: AttentionView, weights: np.ndarray):
    T = len(view.tokens)
    side = min(14.0, 2.0 + 0.18 * T)
    fig = _figure(side + 1.0, side)
    ax = fig.add_subplot()
    image = ax.imshow(weights, cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xticks(range(T), view.tokens, rotation=90, fontsize=7)
    ax.set_yticks(range(T), view.tokens, fontsize=7)
    ax.set_xlabel("to")
    ax.set_ylabel("from")
    fig.colorbar(image, ax=ax, shrink=0.6, label="attention")
    return fig


def _rgb(hex_color: str) -> tuple[float, float, float]:
    return tuple(int(hex_color[k:k + 2], 16) / 255 for k in (1, 3, 5))


def plot_shares(shares: Mapping[str, np.ndarray], path: str | Path, title: str = "") -> Path:
    """One panel per entry of ``shares`` (name -> ``(L, heads)``, e.g. :func:`attention_shares`):
    every head as a dot per layer, the layer mean as a line."""
    if not shares:
        raise ConfigError("plot_shares: nothing to plot")
    fig = _figure(3.0 * len(shares) + 0.6, 3.0)
    axes = fig.subplots(1, len(shares), squeeze=False)[0]
    rng = np.random.default_rng(0)  # horizontal jitter only, so heads with equal values stay visible
    names = {"first": "first token", "sep": "[SEP]", "punct": "punctuation"}
    for ax, (name, values) in zip(axes, shares.items()):
        values = np.asarray(values)
        L, heads = values.shape
        layers = np.arange(FIRST_LAYER, FIRST_LAYER + L)  # numbered as probe and embed number them
        xs = np.repeat(layers, heads) + rng.uniform(-0.15, 0.15, L * heads)
        ax.scatter(xs, values.reshape(-1), s=10, alpha=0.6, color="tab:blue", label="heads")
        ax.plot(layers, values.mean(1), color="black", linewidth=1.5, label="mean")
        ax.set_xticks(layers)
        ax.set_ylim(0, 1)
        ax.set_xlabel("layer")
        ax.set_title(f"attention on {names.get(name, name)}", fontsize=9)
    axes[0].set_ylabel("share of attention")
    axes[0].legend(fontsize=7, loc="upper left")
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def plot_pronoun(result: PronounAttention, path: str | Path, title: str = "") -> Path:
    """Per layer, the attention from the pronoun to each candidate: strongest head (solid) and
    mean over heads (dashed)."""
    fig = _figure(5.0, 3.2)
    ax = fig.add_subplot()
    layers = np.arange(FIRST_LAYER, FIRST_LAYER + result.weights.shape[1])
    for k, (name, w) in enumerate(zip(result.candidates, result.weights)):
        color = HEAD_COLORS[k % len(HEAD_COLORS)]
        ax.plot(layers, w.max(1), color=color, marker="o", label=f"{result.pronoun} → {name} (max head)")
        ax.plot(layers, w.mean(1), color=color, linestyle="--", label=f"{result.pronoun} → {name} (mean)")
    ax.set_xticks(layers)
    ax.set_ylim(0, 1)
    ax.set_xlabel("layer")
    ax.set_ylabel("attention")
    ax.legend(fontsize=7)
    ax.set_title(title or f"attention from {result.pronoun!r}", fontsize=10)
    return _save(fig, path)
