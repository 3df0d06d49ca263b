"""Plots of a ``muppets probe`` report, written beside its JSON.

* ``probe_layers.png`` — test accuracy per layer for every word task (solid: the model;
  dashed: the randomly initialised encoder; dotted: the control task), and selectivity per
  layer in a second panel when control tasks ran; the structural probe's UUAS in a third;
* ``probe_mix.png`` — the scalar-mix weights per task (bars; the expected layer in each
  panel's title), drawn by :func:`~muppets.analysis.layer_weights.plot_layer_weights`;
* ``probe_cumulative.png`` (with ``--cumulative``) — per task, the test accuracy each added
  layer gains, ``Δ(l)`` in points (bars; ``E_Δ[l]`` in each panel's title).

matplotlib draws on an Agg canvas directly (no pyplot, no global backend change).
"""

from __future__ import annotations

from pathlib import Path

from muppets.analysis.layer_weights import layer_labels, plot_layer_weights
from muppets.analysis.probe_data import STRUCTURAL

ENCODER_STYLE = {"pretrained": "-", "random_encoder": "--"}


def _word_tasks(report: dict) -> list[str]:
    return [t for t, r in report["tasks"].items() if t not in STRUCTURAL and "pretrained" in r]


def _line(ax, rows: list[dict], key: str, color: str, style: str, label: str | None) -> None:
    rows = [r for r in rows if key in r]
    if rows:
        ax.plot([r["layer"] for r in rows], [r[key] for r in rows], style, color=color, marker="o", markersize=3,
                label=label)


def plot_layers(report: dict, path: Path) -> Path:
    """Accuracy (and selectivity, UUAS) per layer; see the module docstring."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    tasks = _word_tasks(report)
    has_control = any("selectivity" in r for t in tasks for r in report["tasks"][t]["pretrained"]["layers"])
    trees = [t for t in STRUCTURAL if "pretrained" in report["tasks"].get(t, {})]
    has_tree = bool(trees)
    panels = [p for p, on in (("accuracy", bool(tasks)), ("selectivity", has_control), ("uuas", has_tree)) if on]
    fig = Figure(figsize=(4.2 * max(len(panels), 1) + 1.0, 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, max(len(panels), 1), squeeze=False)[0]
    colors = {t: f"C{i}" for i, t in enumerate([*tasks, *trees])}
    for ax, panel in zip(axes, panels):
        names = trees if panel == "uuas" else tasks
        for name in names:
            for encoder, style in ENCODER_STYLE.items():
                result = report["tasks"][name].get(encoder)
                if result is None or (panel == "selectivity" and encoder != "pretrained"):
                    continue
                label = name if encoder == "pretrained" else None
                _line(ax, result["layers"], panel, colors[name], style, label)
                if panel == "accuracy" and encoder == "pretrained":
                    _line(ax, result["layers"], "control_accuracy", colors[name], ":", None)
        ax.set_xlabel("layer (0 = embeddings)")
        ax.set_ylabel({"accuracy": "test accuracy", "selectivity": "accuracy − control", "uuas": "test UUAS"}[panel])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    name = Path(str(report["model"])).name
    fig.suptitle(f"{name}: solid = model, dashed = random encoder, dotted = control task", fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def plot_mix(report: dict, path: Path) -> Path | None:
    """Bar charts of each task's mix weights (None when no mix was trained)."""
    kind = report.get("encoders", {}).get("pretrained", {}).get("kind", "bert")
    panels = {}
    for name in _word_tasks(report):
        mix = report["tasks"][name]["pretrained"].get("mix")
        if mix:
            title = f"{name}: E[l] = {mix['expected_layer']:.2f}"
            panels[title] = (layer_labels(kind, mix["mixed_layers"]), mix["weights"], mix["gamma"])
    if not panels:
        return None
    return plot_layer_weights(panels, path, title=f"{report['model']}: scalar-mix weights per task")


def plot_cumulative(report: dict, path: Path) -> Path | None:
    """Bars of each task's cumulative-scoring gains ``Δ(l)`` (None when none was computed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    tasks = [t for t in _word_tasks(report) if "cumulative" in report["tasks"][t]["pretrained"]]
    if not tasks:
        return None
    fig = Figure(figsize=(3.2 * len(tasks) + 0.6, 3.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(tasks), squeeze=False, sharey=True)[0]
    for i, (ax, name) in enumerate(zip(axes, tasks)):
        c = report["tasks"][name]["pretrained"]["cumulative"]["accuracy"]
        ax.bar(c["layers"][1:], [100 * d for d in c["delta"]], color=f"C{i}")
        ax.set_xticks(c["layers"][1:])
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.set_title(f"{name}: E_Δ[l] = {c['expected_layer']:.2f}", fontsize=9)
        ax.set_xlabel("layer added to the mix")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("Δ test accuracy (points)")
    fig.suptitle(f"{Path(str(report['model'])).name}: what each layer adds (cumulative scoring)", fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def plot_report(report: dict, out: Path) -> list[Path]:
    """Write every plot of ``report`` into ``out``; returns their paths."""
    paths = [plot_layers(report, out / "probe_layers.png")]
    for optional in (plot_mix(report, out / "probe_mix.png"), plot_cumulative(report, out / "probe_cumulative.png")):
        if optional is not None:
            paths.append(optional)
    return paths
