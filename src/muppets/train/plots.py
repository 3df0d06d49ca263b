"""One picture of a run: ``run_dir/training_curves.png``, drawn from ``run_dir/log.jsonl``.

The :class:`~muppets.train.Trainer` redraws it at every evaluation and when training ends
(``TrainConfig.plot``, on by default), so every recipe on the trainer (pretraining, fine-tuning,
feature-based) gets it for free; word2vec's own trainer draws it when it returns::

    write_run_plot(Path("runs/bert-mini"))      # or by hand, for any run directory

Panels (decided by :func:`plan_panels`, a pure function of the log records):

- ``training loss``: the raw per-step loss (faint) and its moving average; with more than one
  loss term (``loss/mlm``, ``loss/nsp`` …) also each term's moving average;
- one panel per evaluated metric ``eval/<name>``, with ``eval/dev/<name>`` (the dev split
  watched during fine-tuning) drawn in the same panel; ``mix_w0 … mix_wK`` (the ScalarMix
  weights of feature-based runs) share one panel, and so do per-class scores such as
  ``f1_LOC``, ``f1_PER`` when ``f1`` is logged too, a multi-task run's metrics of one task
  (``eval/<task>/<metric>``) and its task weights (``eval/weight/<task>``). Perplexities use a
  log scale, labelled with plain numbers. ``eval_labels`` names what the evaluations scored (a fine-tuning run: ``{"":
  "train-slice (692 of 6,920 train examples, selected on)", "dev/": "dev (200 of 872
  examples)"}``): those lines carry the names in a legend instead of ``eval`` / ``dev``.
  ``baselines`` draws what a baseline scores on the same examples as a dashed horizontal line in
  its metric's panel (a pretraining run: ``{"mlm_accuracy": ("unigram: the most frequent
  token", 0.058)}``).

:func:`write_comparison_plot` draws several runs of one kind into one picture (a fine-tuning
from pretrained weights beside one from a random initialisation): a line per run in every
panel, baselines as above.

Every panel spans the same steps (:func:`step_range`), so an evaluation sits under the loss of
its step and a panel with one point still has a step axis (whole steps; a lone point is
marked); fewer than 50 losses are drawn as they are (a "mean of 1" would be the same line).
The margins are widened to what the y tick labels measure, so none is cut off.

Non-finite values and unreadable lines (a run killed mid-write) are skipped. Drawing never
raises: a failure is logged as a warning, and without matplotlib nothing is drawn (logged once).
matplotlib draws on an Agg canvas directly (no pyplot, no global backend change).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from muppets.config import atomic_path
from muppets.train.logger import read_log

logger = logging.getLogger(__name__)

PLOT_FILE = "training_curves.png"
MAX_PANELS = 12  # metrics beyond these are left out of the picture (they stay in log.jsonl)
MAX_LINE_POINTS = 2000  # loss lines are thinned to this many points (the average uses all)
_MIX_WEIGHT = re.compile(r"mix_w\d+")
_missing_matplotlib_logged = False


@dataclass
class Series:
    """One line of a panel: ``style`` is ``raw`` (faint), ``smooth`` (a line) or ``points`` (markers)."""

    label: str
    steps: np.ndarray  # (N,) optimizer step of every value
    values: np.ndarray  # (N,) finite values
    style: str = "points"  # raw | smooth | points | baseline (values[0] as a dashed line across the panel)

    @classmethod
    def baseline(cls, label: str, value: float) -> Series:
        """A horizontal line at ``value`` across the whole panel (no steps of its own)."""
        return cls(label, np.zeros(0, dtype=np.int64), np.array([float(value)]), "baseline")


@dataclass
class Panel:
    """One subplot: a title and its lines against the step."""

    title: str
    series: list[Series] = field(default_factory=list)
    log_y: bool = False
    legend: bool = False  # a legend even for one line (its label says what was scored)


# ----------------------------------------------------------------------------- deciding


Column = tuple[list[int], list[Any]]  # the steps and the values of one log key


def _columns(records: list[dict]) -> dict[str, Column]:
    """``{key: (steps, values)}`` of the keys plotted (``loss``, ``loss/*``, ``eval/*``), in the
    order they first appear, in one pass over the records."""
    columns: dict[str, Column] = {}
    for record in records:
        step = record.get("step")
        if type(step) is not int:
            continue
        for key, value in record.items():
            if key == "loss" or key.startswith(("loss/", "eval/")):
                steps, values = columns.setdefault(key, ([], []))
                steps.append(step)
                values.append(value)
    return columns


def _finite(column: Column) -> tuple[np.ndarray, np.ndarray]:
    """The steps and values of a column whose value is a finite number, as two arrays."""
    values = np.array([v if type(v) in (int, float) else np.nan for v in column[1]], dtype=np.float64)
    keep = np.isfinite(values)
    return np.asarray(column[0], dtype=np.int64)[keep], values[keep]


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over up to ``window`` values (shorter at the start), same length as ``values``.

    >>> moving_average(np.array([1.0, 3.0, 5.0, 7.0]), 2).tolist()
    [1.0, 2.0, 4.0, 6.0]
    """
    if len(values) == 0 or window <= 1:
        return values.copy()
    sums = np.cumsum(np.concatenate([[0.0], values]))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def smoothing_window(n: int) -> int:
    """Moving-average width for ``n`` logged values: about 1/25 of them, at least 1, at most 500."""
    return max(1, min(500, n // 25))


def _loss_panel(columns: dict[str, Column]) -> Panel | None:
    steps, loss = _finite(columns.get("loss", ([], [])))
    if len(loss) == 0:
        return None
    window = smoothing_window(len(loss))
    if window == 1:  # too few values to smooth: the loss itself, one line
        panel = Panel("training loss", [Series("loss", steps, loss, "smooth")])
    else:
        panel = Panel("training loss", [Series("loss", steps, loss, "raw"), Series(
            f"loss (mean of {window})", steps, moving_average(loss, window), "smooth")])
    terms = sorted(k for k in columns if k.startswith("loss/"))
    if len(terms) > 1:
        for key in terms:
            s, v = _finite(columns[key])
            if len(v):
                panel.series.append(Series(key[len("loss/"):], s, moving_average(v, window), "smooth"))
    return panel


def _metric_group(name: str, names: set[str]) -> tuple[str, str]:
    """``(panel title, line label)`` of the metric ``eval/<name>``; ``names`` are all metric
    names logged (without ``dev/``), so that ``f1_LOC`` joins ``f1 by class`` when ``f1`` exists.
    A multi-task run's ``<task>/<metric>`` share one panel per task (``<task>/f1_LOC`` goes to
    ``<task> f1 by class``), so five GLUE tasks take five panels, not one per metric."""
    dev, base = (True, name[len("dev/"):]) if name.startswith("dev/") else (False, name)
    task, slash, metric = base.rpartition("/")
    head, _, tail = metric.partition("_")
    if _MIX_WEIGHT.fullmatch(base):
        title, label = "mix weights", base
    elif base.startswith("weight/"):  # multi-task weights (eval/weight/<task>): one panel for all tasks
        title, label = "task weights", base[len("weight/"):]
    elif tail and f"{task}{slash}{head}" in names:
        title, label = f"{task} {head} by class".lstrip(), tail
    elif slash:
        title, label = task, metric
    else:
        return base, "dev" if dev else "eval"
    return (f"{title} (dev)" if dev else title), label


Baselines = dict[str, tuple[str, float]]  # metric name (as logged, without eval/ and dev/) -> (label, value)


def _metric_panels(columns: dict[str, Column], eval_labels: dict[str, str] | None = None) -> list[Panel]:
    names = {k[len("eval/"):].removeprefix("dev/") for k in columns if k.startswith("eval/")}
    named = {"eval": (eval_labels or {}).get(""), "dev": (eval_labels or {}).get("dev/")}
    panels: dict[str, Panel] = {}
    for key, column in columns.items():
        if key.startswith("eval/"):
            title, label = _metric_group(key[len("eval/"):], names)
            steps, values = _finite(column)
            if len(values):
                panel = panels.setdefault(title, Panel(title))
                if named.get(label):
                    label, panel.legend = named[label], True
                panel.series.append(Series(label, steps, values))
    for panel in panels.values():
        panel.log_y = "perplexity" in panel.title and all(bool((s.values > 0).all()) for s in panel.series)
    return list(panels.values())


def add_baselines(panels: list[Panel], baselines: Baselines | None) -> list[Panel]:
    """Append to each metric's panel (its title is the metric's name, e.g. ``mlm_accuracy``)
    the line of that metric's baseline; a baseline without a panel, or not finite, is left out."""
    for panel in panels:
        label, value = (baselines or {}).get(panel.title, ("", math.nan))
        if math.isfinite(value):
            panel.series.append(Series.baseline(label, value))
            panel.log_y = panel.log_y and value > 0
    return panels


def plan_panels(records: list[dict], eval_labels: dict[str, str] | None = None,
                baselines: Baselines | None = None) -> list[Panel]:
    """The subplots for these log records: training loss first, then the evaluated metrics in
    the order they first appear (at most :data:`MAX_PANELS` in all; empty panels dropped);
    ``eval_labels`` (see the module docstring) names the lines of ``eval/<m>`` and ``eval/dev/<m>``;
    ``baselines`` adds a dashed line to a metric's panel (:func:`add_baselines`)."""
    columns = _columns(records)
    loss = _loss_panel(columns)
    panels = ([loss] if loss is not None else []) + add_baselines(_metric_panels(columns, eval_labels), baselines)
    if len(panels) > MAX_PANELS:
        logger.debug("plotting %d of %d panels", MAX_PANELS, len(panels))
    return panels[:MAX_PANELS]


def comparison_panels(runs: dict[str, list[dict]], baselines: Baselines | None = None,
                      metrics: Sequence[str] | None = None) -> list[Panel]:
    """The subplots of several runs in one picture (``runs``: label -> its log records, e.g.
    ``{"pretrained": …, "random init": …}``): the training loss (each run's moving average,
    or the loss itself under 50 values), then every evaluated metric (``eval/<m>`` and
    ``eval/dev/<m>``, titled ``<m>`` and ``dev <m>``; only those named in ``metrics``, e.g.
    ``["dev/f1"]``, when given) with one line per run, in the order they first appear;
    ``baselines`` as in :func:`plan_panels`, keyed by the metric without ``dev/``."""
    loss, panels = Panel("training loss"), {}
    for label, records in runs.items():
        columns = _columns(records)
        steps, values = _finite(columns.get("loss", ([], [])))
        if len(values):
            window = smoothing_window(len(values))
            loss.series.append(Series(label if window == 1 else f"{label} (mean of {window})", steps,
                                      moving_average(values, window), "smooth"))
        for key, column in columns.items():
            if key.startswith("eval/"):
                steps, values = _finite(column)
                name = key[len("eval/"):]
                if len(values) and (metrics is None or name in metrics):
                    panels.setdefault(name, Panel(name.replace("/", " "), legend=True)).series.append(
                        Series(label, steps, values))
    for name, panel in panels.items():
        label, value = (baselines or {}).get(name.removeprefix("dev/"), ("", math.nan))
        if math.isfinite(value):
            panel.series.append(Series.baseline(label, value))
    return (([loss] if loss.series else []) + list(panels.values()))[:MAX_PANELS]


# ----------------------------------------------------------------------------- drawing


def _thin(n: int) -> np.ndarray:
    """Indices of at most :data:`MAX_LINE_POINTS` evenly spread points of ``n`` (first and last kept)."""
    return np.unique(np.linspace(0, n - 1, min(n, MAX_LINE_POINTS)).astype(int))


def _draw_series(ax: Any, s: Series, color: str) -> None:
    lone = len(s.values) == 1  # a line through one point draws nothing: mark it
    if s.style == "baseline":
        ax.axhline(float(s.values[0]), color="0.3", linestyle="--", linewidth=1.1, label=s.label)
    elif s.style == "raw":
        take = _thin(len(s.values))
        ax.plot(s.steps[take], s.values[take], color=color, alpha=0.25, linewidth=0.7)
    elif s.style == "smooth":  # a moving average loses nothing visible when thinned
        take = _thin(len(s.values))
        ax.plot(s.steps[take], s.values[take], "o-" if lone else "-", color=color, linewidth=1.4,
                markersize=3, label=s.label)
    else:
        ax.plot(s.steps, s.values, "o-", color=color, markersize=3, linewidth=1.0, label=s.label)


def step_range(panels: list[Panel]) -> tuple[float, float]:
    """The x limits every panel shares: the first to the last step of any line, padded by 5 %
    (half a step at least, one step either side of a single step), so that an evaluation sits
    where it happened in the run, and a panel with one point still has a step axis.

    >>> step_range([Panel("x", [Series("a", np.array([3]), np.array([0.5]))])])
    (2.0, 4.0)
    """
    steps = [s.steps for p in panels for s in p.series if len(s.steps)]
    if not steps:
        return 0.0, 1.0
    first, last = float(min(x.min() for x in steps)), float(max(x.max() for x in steps))
    pad = max(0.05 * (last - first), 0.5) if last > first else 1.0
    return first - pad, last + pad


def _draw_panel(ax: Any, panel: Panel, x_label: str, x_range: tuple[float, float]) -> None:
    from matplotlib.ticker import MaxNLocator

    colour = -1
    for index, series in enumerate(panel.series):
        if series.style == "baseline":  # grey and dashed, whatever the run lines' colours
            _draw_series(ax, series, "0.3")
            continue
        if index == 0 or panel.series[index - 1].style != "raw":  # a raw line and its average share one
            colour += 1
        _draw_series(ax, series, f"C{colour % 10}")
    if panel.log_y:  # plain numbers (20, 30, 0.001), not 2 x 10^1 at the default size
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(_plain_log_formatter())
        ax.yaxis.set_minor_formatter(_plain_log_formatter(minor=True))
    ax.set_xlim(*x_range)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))  # steps, chunks: whole numbers
    ax.set_title(panel.title, fontsize=10)
    ax.set_xlabel(x_label, fontsize=8)
    ax.tick_params(which="both", labelsize=8)
    ax.grid(alpha=0.3)
    if panel.legend or len([s for s in panel.series if s.style != "raw"]) > 1:
        ax.legend(fontsize=7)


def _plain_log_formatter(minor: bool = False) -> Any:
    """matplotlib's choice of which log ticks to label (minor ones only over a decade or two),
    each written as a plain number: ``20``, ``0.6``, ``0.0001``, ``1e+06``."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def __call__(self, x: float, pos: int | None = None) -> str:
            return f"{x:g}" if super().__call__(x, pos) else ""

    return Plain(labelOnlyBase=not minor)


def _fit_margins(fig: Any, axes: list[Any], cols: int) -> None:
    """Widen the left margin and the gaps between columns to what the y tick labels take, so
    that none is cut at the figure's edge or runs into the panel on its left (measured, not
    guessed: labels such as −0.000125 or −654321 are wider than the fixed margin)."""
    renderer = fig.canvas.get_renderer()
    dpi, width = fig.dpi, fig.get_figwidth()
    # inches each panel's y axis (tick labels, offset text) takes left of the panel
    needs = [(ax.bbox.x0 - ax.yaxis.get_tightbbox(renderer).x0) / dpi for ax in axes]
    params = fig.subplotpars
    left = max(params.left * width, max(needs[::cols]) + 0.12)
    inner = [n for i, n in enumerate(needs) if i % cols]
    right = (1 - params.right) * width
    panel_width = (width - params.left * width - right) / (cols + (cols - 1) * params.wspace)
    gap = max(params.wspace * panel_width, max(inner, default=0.0) + 0.3)
    panel_width = (width - left - right - (cols - 1) * gap) / cols
    fig.subplots_adjust(left=left / width, wspace=gap / panel_width)


def render(panels: list[Panel], title: str = "", x_label: str = "step") -> Any:
    """A matplotlib ``Figure`` (Agg canvas) with one axes per panel, three panels a row, all
    against ``x_label`` (word2vec logs chunks) over the same range (:func:`step_range`)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cols = max(1, min(3, len(panels)))
    rows = max(1, math.ceil(len(panels) / cols))
    top = 0.65 if title else 0.2  # inches above the panels
    width, height = 4.2 * cols, 3.0 * rows + top
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    if title:
        fig.suptitle(title, fontsize=11)
    if not panels:
        fig.text(0.5, 0.5, "nothing logged yet", ha="center", va="center")
        return fig
    # fixed margins in inches, widened where the labels need it: a layout engine would cost
    # more than the drawing itself
    fig.subplots_adjust(left=0.6 / width, right=1 - 0.15 / width, bottom=0.5 / height,
                        top=1 - top / height, wspace=0.3, hspace=0.5)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[len(panels):]:
        fig.delaxes(ax)
    x_range = step_range(panels)
    for ax, panel in zip(axes, panels):
        _draw_panel(ax, panel, x_label, x_range)
    _fit_margins(fig, list(axes[:len(panels)]), cols)
    return fig


def write_plot(path: Path, panels: Callable[[], list[Panel]], title: str = "", x_label: str = "step") -> Path | None:
    """Draw ``panels()`` into the PNG ``path`` atomically (a temporary file renamed into place).
    Returns the path, or None when nothing was drawn: matplotlib is missing (logged once) or
    drawing failed (logged as a warning); it never raises."""
    path = Path(path)
    if not _have_matplotlib():
        return None
    try:
        fig = render(panels(), title, x_label)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=90)
        return path
    except Exception as error:  # a picture must never end a training run
        logger.warning("could not draw %s: %s: %s", path, type(error).__name__, error)
        return None


def write_comparison_plot(run_dirs: dict[str, Path], path: Path, title: str = "",
                          baselines: Baselines | None = None, metrics: Sequence[str] | None = None) -> Path | None:
    """Draw the runs' ``log.jsonl`` (``run_dirs``: label -> run directory) into one picture at
    ``path`` (:func:`comparison_panels`); None when nothing was drawn (see :func:`write_plot`)."""
    return write_plot(path, lambda: comparison_panels(
        {label: read_log(Path(d), strict=False) for label, d in run_dirs.items()}, baselines, metrics), title)


def write_run_plot(run_dir: Path, path: Path | None = None, title: str | None = None,
                   panels: Callable[[list[dict]], list[Panel]] = plan_panels, x_label: str = "step") -> Path | None:
    """Draw ``run_dir/log.jsonl`` into ``path`` (default ``run_dir/training_curves.png``),
    atomically (a temporary file renamed into place); ``panels`` decides the subplots from the
    log's records (another picture of the same run passes its own); ``x_label`` names what the
    log's ``step`` counts (word2vec: chunks). Returns the path, or None
    when nothing was drawn: matplotlib is missing (logged once) or drawing failed (logged as a
    warning)."""
    run_dir = Path(run_dir)
    path = Path(path) if path is not None else run_dir / PLOT_FILE
    return write_plot(path, lambda: panels(read_log(run_dir, strict=False)),
                      run_dir.name if title is None else title, x_label)


def _have_matplotlib() -> bool:
    global _missing_matplotlib_logged
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if not _missing_matplotlib_logged:
            _missing_matplotlib_logged = True
            logger.info("matplotlib is not installed: no %s (pip install matplotlib)", PLOT_FILE)
        return False
    return True
