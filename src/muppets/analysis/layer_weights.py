"""Bar charts of learned ScalarMix weights: which layers a task leans on (ELMo §5.2, Fig. 2).

One PNG per task, one panel per mixed model; each panel shows ``s = softmax(w)`` per layer and
a dashed line at the uniform ``1/K`` a mix starts from, with ``γ`` in the panel title::

    plot_layer_weights({"ELMo": (["token", "biLSTM 1", "biLSTM 2"], [0.2, 0.5, 0.3], 1.4)},
                       "runs/sst2-mix.png", title="SST-2")

matplotlib draws on an Agg canvas directly (no pyplot, no global backend change).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from muppets.errors import ConfigError

Panel = tuple[Sequence[str], Sequence[float], float | None]  # layer labels, weights, gamma (or None)


def layer_labels(kind: str, layers: Sequence[int]) -> list[str]:
    """Readable names of a backbone's layers: ELMo ``token`` / ``biLSTM k``; BERT and GPT
    ``emb`` / ``k``; static vectors ``vectors``.

    >>> layer_labels("elmo", [0, 1, 2]), layer_labels("bert", [0, 3])
    (['token', 'biLSTM 1', 'biLSTM 2'], ['emb', '3'])
    """
    if kind in ("static", "nnlm"):
        return ["vectors" for _ in layers]
    if kind == "elmo":
        return ["token" if k == 0 else f"biLSTM {k}" for k in layers]
    return ["emb" if k == 0 else str(k) for k in layers]


def plot_layer_weights(panels: Mapping[str, Panel], path: str | Path, title: str = "") -> Path:
    """Write a PNG with one bar chart per entry of ``panels`` (name -> labels, weights, gamma)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not panels:
        raise ConfigError("plot_layer_weights: nothing to plot")
    fig = Figure(figsize=(3.2 * len(panels) + 0.8, 3.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, (labels, weights, gamma)) in zip(axes, panels.items()):
        if len(labels) != len(weights):
            raise ConfigError(f"panel {name!r}: {len(labels)} labels for {len(weights)} weights")
        ax.bar(range(len(weights)), weights, color="tab:blue")
        ax.axhline(1.0 / len(weights), color="grey", linestyle="--", linewidth=1)
        many = len(weights) > 4  # slant the labels of deep models
        ax.set_xticks(range(len(weights)), labels, rotation=45 if many else 0, ha="right" if many else "center")
        ax.set_ylim(0, max(1.0 / len(weights), max(weights)) * 1.15)
        ax.set_title(name if gamma is None else f"{name} (γ = {gamma:.2f})", fontsize=9)
        ax.set_ylabel("softmax weight")
    if title:
        fig.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path
