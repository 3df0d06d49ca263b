"""What a long run shows: ``training_curves.png`` redrawn by the Trainer (panels decided from
``log.jsonl``, robust to NaN, no evaluations and a killed run's half line; never raising), and
the progress bar's ETA of the whole run (steps, ``max_minutes`` budget, resume)."""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tqdm import tqdm

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _toy_train import ToyData, ToyModel, toy_config  # noqa: E402

from muppets.train import Trainer  # noqa: E402
from muppets.train import plots  # noqa: E402
from muppets.train.distributed import DistInfo  # noqa: E402
from muppets.train.logger import read_log  # noqa: E402
from muppets.train.plots import (PLOT_FILE, Panel, Series, moving_average, plan_panels, render,  # noqa: E402
                                 write_run_plot)
from muppets.train.progress import BAR_FORMAT, Eta, run_eta  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _is_png(path: Path) -> bool:
    data = path.read_bytes()
    return data[:8] == PNG_MAGIC and len(data) > 5000


def _write_log(run_dir: Path, records: list[dict], tail: str = "") -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in records)
    (run_dir / "log.jsonl").write_text(text + tail, encoding="utf-8")


def _steps(n: int, terms: tuple[str, ...] = ("task",)) -> list[dict]:
    return [{"step": s, "loss": 2.0 / s, **{f"loss/{t}": 2.0 / s / len(terms) for t in terms}, "lr": 0.1}
            for s in range(1, n + 1)]


# ------------------------------------------------------------------ written by the Trainer


def test_trainer_draws_the_plot_at_every_evaluation_and_at_the_end(tmp_path: Path) -> None:
    seen: list[bool] = []

    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        seen.append((tmp_path / PLOT_FILE).is_file())  # drawn after the previous evaluation?
        return {"accuracy": 0.5, "dev/accuracy": 0.4}

    config = toy_config(steps=4, eval_every=2)
    Trainer(ToyModel(), ToyData(8, 2), config, tmp_path, evaluate=evaluate).train(resume=False)
    assert seen == [False, True]
    assert _is_png(tmp_path / PLOT_FILE)
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary file was renamed into place


def test_trainer_draws_the_plot_at_the_end_without_evaluations(tmp_path: Path) -> None:
    Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=3), tmp_path).train(resume=False)
    assert _is_png(tmp_path / PLOT_FILE)


def test_plot_off_writes_nothing(tmp_path: Path) -> None:
    config = toy_config(steps=2, eval_every=1, plot=False)
    Trainer(ToyModel(), ToyData(8, 2), config, tmp_path, evaluate=lambda m: {"x": 1.0}).train(resume=False)
    assert (tmp_path / "log.jsonl").is_file() and not (tmp_path / PLOT_FILE).exists()


def test_the_callers_picture_is_redrawn_with_the_trainers(tmp_path: Path) -> None:
    steps: list[int] = []  # the last logged step each time draw() runs
    config = toy_config(steps=4, eval_every=2)
    Trainer(ToyModel(), ToyData(8, 2), config, tmp_path, evaluate=lambda m: {"x": 1.0},
            draw=lambda: steps.append(read_log(tmp_path)[-1]["step"])).train(resume=False)
    assert steps == [2, 4]  # after each evaluation's record (the last step's: once)
    off = tmp_path / "off"
    Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=2, eval_every=1, plot=False), off,
            draw=lambda: steps.append(-1)).train(resume=False)
    assert steps == [2, 4]


def test_only_the_main_rank_draws(tmp_path: Path) -> None:
    trainer = Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=2, eval_every=1), tmp_path)
    _write_log(tmp_path, _steps(2))  # a log the main rank would have written
    trainer.dist = DistInfo(rank=1, world=1, local_rank=1, is_main=False)
    trainer.train(resume=False)
    assert not (tmp_path / PLOT_FILE).exists()


# ------------------------------------------------------------------ which panels


def test_panels_loss_terms_metrics_dev_twins_and_mix_weights() -> None:
    records = _steps(60, terms=("mlm", "nsp"))  # 60 losses: a moving mean of 2
    for step in (10, 20, 30):
        records.append({"step": step, "eval/mlm_perplexity": 50.0 / step, "eval/accuracy": step / 40,
                        "eval/dev/accuracy": step / 50, "eval/mix_w0": 0.3, "eval/mix_w1": 0.7})
        records.append({"step": step, "checkpoint": f"step-{step}"})
    panels = plan_panels(records)
    assert [p.title for p in panels] == ["training loss", "mlm_perplexity", "accuracy", "mix weights"]
    loss = panels[0]
    assert [s.style for s in loss.series] == ["raw", "smooth", "smooth", "smooth"]
    assert [s.label for s in loss.series] == ["loss", "loss (mean of 2)", "mlm", "nsp"]
    assert [s.label for s in panels[2].series] == ["eval", "dev"]
    assert [s.label for s in panels[3].series] == ["mix_w0", "mix_w1"]
    assert panels[1].log_y and not panels[2].log_y
    assert panels[2].series[1].steps.tolist() == [10, 20, 30]
    fig = render(panels, "run")
    assert len(fig.axes) == 4  # the empty cells of the 2 x 3 grid are removed


def test_per_class_scores_share_a_panel() -> None:
    scores = {"f1": 0.5, "f1_LOC": 0.6, "f1_PER": 0.4, "mlm_loss": 2.0, "mlm_accuracy": 0.3}
    records = _steps(2) + [{"step": 2, **{f"eval/{k}": v for k, v in scores.items()},
                            **{f"eval/dev/{k}": v for k, v in scores.items()}}]
    panels = {p.title: [s.label for s in p.series] for p in plan_panels(records)}
    assert panels == {"training loss": ["loss"], "f1": ["eval", "dev"],
                      "f1 by class": ["LOC", "PER"], "f1 by class (dev)": ["LOC", "PER"],
                      "mlm_loss": ["eval", "dev"], "mlm_accuracy": ["eval", "dev"]}


def test_task_weights_share_a_panel() -> None:
    records = _steps(2, terms=("task:a", "task:b")) + [
        {"step": 2, "eval/a/f1": 0.5, "eval/b/accuracy": 0.7, "eval/weight/a": 1.2, "eval/weight/b": 0.8}]
    panels = {p.title: [s.label for s in p.series] for p in plan_panels(records)}
    assert panels["task weights"] == ["a", "b"] and "weight/a" not in panels


def test_a_multitask_run_gets_one_panel_per_task() -> None:
    """Five GLUE tasks with their metrics used to take 12 panels and lose the weights panel."""
    scores = {"rte/accuracy": 0.6, "mrpc/accuracy": 0.8, "mrpc/precision": 0.8, "mrpc/recall": 0.9,
              "mrpc/f1": 0.85, "stsb/pearson": 0.8, "stsb/spearman": 0.8, "cola/mcc": 0.2,
              "sst2/accuracy": 0.9, "ner/f1": 0.8, "ner/f1_LOC": 0.9, "ner/f1_PER": 0.7, "mean": 0.6,
              "weight/rte": 1.0, "weight/ner": 2.0}
    records = _steps(2, terms=("task:rte", "task:ner")) + [
        {"step": 2, **{f"eval/{k}": v for k, v in scores.items()}, "eval/dev/ner/f1_LOC": 0.8}]
    panels = {p.title: [s.label for s in p.series] for p in plan_panels(records)}
    assert panels == {"training loss": ["loss", "task:ner", "task:rte"],
                      "rte": ["accuracy"], "mrpc": ["accuracy", "precision", "recall", "f1"],
                      "stsb": ["pearson", "spearman"], "cola": ["mcc"], "sst2": ["accuracy"],
                      "ner": ["f1"], "ner f1 by class": ["LOC", "PER"], "ner f1 by class (dev)": ["LOC"],
                      "mean": ["eval"], "task weights": ["rte", "ner"]}


def test_one_loss_term_draws_no_duplicate_line() -> None:
    panels = plan_panels(_steps(100, terms=("task",)))
    assert [p.title for p in panels] == ["training loss"]
    assert [(s.label, s.style) for s in panels[0].series] == [("loss", "raw"), ("loss (mean of 4)", "smooth")]


def test_too_few_losses_to_smooth_draw_one_line_not_a_mean_of_1() -> None:
    """Under 50 logged losses the moving mean would be the loss itself: one line, no legend."""
    panels = plan_panels(_steps(49, terms=("task",)))
    assert [(s.label, s.style) for s in panels[0].series] == [("loss", "smooth")]
    assert render(panels).axes[0].get_legend() is None
    legend = render(plan_panels(_steps(49, terms=("mlm", "nsp")))).axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["loss", "mlm", "nsp"]


def test_panels_are_capped() -> None:
    records = _steps(3) + [{"step": 3, **{f"eval/m{k}": 1.0 for k in range(30)}}]
    assert len(plan_panels(records)) == plots.MAX_PANELS


# ------------------------------------------------------------------ what the picture shows


def _tick_labels(ax, which: str = "both") -> list:
    """The y tick labels matplotlib draws (visible, non-empty), after a draw."""
    ticks = ax.yaxis.get_major_ticks() + (ax.yaxis.get_minor_ticks() if which == "both" else [])
    return [t.label1 for t in ticks if t.label1.get_visible() and t.label1.get_text()
            and ax.get_ylim()[0] <= t.get_loc() <= ax.get_ylim()[1]]


def test_a_single_point_panel_gets_the_runs_step_axis_and_a_marker() -> None:
    """One evaluation (or a one-step run) used to get an x axis of 2.85 … 3.15 and, for a line
    style, nothing drawn at all."""
    records = [{"step": 3, "loss": 0.7}, {"step": 3, "eval/accuracy": 0.5}]
    fig = render(plan_panels(records))
    fig.canvas.draw()
    for ax in fig.axes:
        low, high = ax.get_xlim()
        assert low < 3 < high and high - low >= 2  # the point inside, a whole step either side
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert 3 in ticks and all(float(t).is_integer() for t in ticks)
        (line,) = ax.get_lines()
        assert line.get_marker() == "o"  # a lone point is drawn, whatever its line style
    longer = render(plan_panels(_steps(40) + [{"step": 40, "eval/accuracy": 0.5}]))
    assert longer.axes[1].get_xlim() == longer.axes[0].get_xlim()  # the evaluation sits where it ran
    assert longer.axes[1].get_xlim()[0] < 1 and longer.axes[1].get_xlim()[1] > 40


def test_no_y_label_is_cut_off_or_runs_into_the_next_panel() -> None:
    """ELMo's perplexities (log scale, minor labels like 2 x 10^1) and multitask.png's losses
    used to be cut at the figure's left edge; every panel of every column is checked."""
    shown = [((28.0, 19.0, 12.0), True), ((0.13, 0.125, 0.12), True), ((123456.0, 654321.0), True),
             ((-1.2e-4, -1.3e-4), False), ((-123456.0, -654321.0), False), ((0.12345, 0.12349), False)]
    panels = [Panel(f"p{k}", [Series("eval", np.arange(1, len(v) + 1) * 100, np.array(v))], log_y=log)
              for k, (v, log) in enumerate(shown)]  # 2 rows of 3: log and linear in the first column
    fig = render(panels, "run")
    fig.canvas.draw()
    width = fig.bbox.x1
    for index, ax in enumerate(fig.axes):
        labels = _tick_labels(ax)
        assert labels and all(t.get_fontsize() == 8 for t in labels)
        left_edge = 0.0 if index % 3 == 0 else fig.axes[index - 1].get_tightbbox().x1
        for label in labels:
            extent = label.get_window_extent()
            assert left_edge <= extent.x0 and extent.x1 <= min(ax.bbox.x0, width), (ax.get_title(), label.get_text())


def test_log_scale_labels_are_plain_numbers() -> None:
    panel = Panel("perplexity", [Series("eval", np.array([10, 20, 30]), np.array([28.0, 15.0, 6.0]))], log_y=True)
    fig = render([panel])
    fig.canvas.draw()
    texts = [t.get_text() for t in _tick_labels(fig.axes[0])]
    assert {"10", "20"} <= set(texts)
    assert all(float(t) > 0 for t in texts)  # no mathtext such as $\\mathdefault{2\\times10^{1}}$


def test_the_x_axis_is_named_after_what_the_log_counts() -> None:
    assert {ax.get_xlabel() for ax in render(plan_panels(_steps(5))).axes} == {"step"}
    assert {ax.get_xlabel() for ax in render(plan_panels(_steps(5)), x_label="chunk").axes} == {"chunk"}


def test_moving_average_is_a_trailing_mean() -> None:
    values = torch.arange(1.0, 11.0).numpy()
    smooth = moving_average(values, 4)
    assert smooth.tolist()[:4] == [1.0, 1.5, 2.0, 2.5]
    assert smooth[-1] == pytest.approx((7 + 8 + 9 + 10) / 4)


# ------------------------------------------------------------------ odd logs


def test_nan_losses_and_metrics_are_skipped(tmp_path: Path) -> None:
    records = _steps(6)
    records[2]["loss"] = math.nan
    records[4]["loss"] = math.inf
    records.append({"step": 6, "eval/accuracy": math.nan})
    _write_log(tmp_path, records)  # json.dumps writes NaN / Infinity, as the trainer's log would
    panels = plan_panels(read_log(tmp_path, strict=False))
    assert [p.title for p in panels] == ["training loss"]  # the all-NaN metric has no panel
    assert panels[0].series[0].steps.tolist() == [1, 2, 4, 6]
    assert write_run_plot(tmp_path) is not None and _is_png(tmp_path / PLOT_FILE)


def test_log_without_evaluations(tmp_path: Path) -> None:
    _write_log(tmp_path, _steps(50))
    assert len(plan_panels(read_log(tmp_path))) == 1
    assert _is_png(write_run_plot(tmp_path))


def test_truncated_last_line_of_a_killed_run(tmp_path: Path) -> None:
    _write_log(tmp_path, _steps(8) + [{"step": 8, "eval/accuracy": 0.7}], tail='{"step": 9, "loss": 0.3')
    with pytest.raises(ValueError):
        read_log(tmp_path)  # the strict reader refuses it ...
    assert _is_png(write_run_plot(tmp_path))  # ... the picture does not
    assert [p.title for p in plan_panels(read_log(tmp_path, strict=False))] == ["training loss", "accuracy"]


def test_empty_or_missing_log_still_draws(tmp_path: Path) -> None:
    assert plan_panels([]) == []
    assert write_run_plot(tmp_path).read_bytes()[:8] == PNG_MAGIC  # "nothing logged yet"


def test_a_failure_is_a_warning_not_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _write_log(tmp_path, _steps(4))
    (tmp_path / PLOT_FILE).mkdir()  # a directory where the picture should go
    with caplog.at_level(logging.WARNING, logger="muppets.train.plots"):
        assert write_run_plot(tmp_path) is None
    assert "could not draw" in caplog.text and not list(tmp_path.glob(".*.tmp"))


def test_without_matplotlib_nothing_is_drawn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    _write_log(tmp_path, _steps(4))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    monkeypatch.setattr(plots, "_missing_matplotlib_logged", False)
    with caplog.at_level(logging.INFO, logger="muppets.train.plots"):
        assert write_run_plot(tmp_path) is None and write_run_plot(tmp_path) is None
    assert caplog.text.count("matplotlib is not installed") == 1
    assert not (tmp_path / PLOT_FILE).exists()


def test_a_long_log_draws_in_well_under_a_second(tmp_path: Path) -> None:
    records = []
    for step in range(1, 20_001):
        records.append({"step": step, "loss": 3 + math.sin(step), "loss/mlm": 2.5, "loss/nsp": 0.5,
                        "lr": 1e-4, "grad_norm": 1.0, "real_tokens": 4096, "tokens_per_s": 3e3, "elapsed_s": step})
        if step % 500 == 0:
            records.append({"step": step, "eval/mlm_loss": 2.0, "eval/mlm_accuracy": 0.4,
                            "eval/mlm_perplexity": 7.4, "eval/nsp_accuracy": 0.8})
    _write_log(tmp_path, records)
    write_run_plot(tmp_path)  # the first call imports matplotlib
    # CPU time: other jobs on the cores stretch the wall time, not this; the best of three draws,
    # since a busy neighbour on the same core still inflates it (1.0 s alone, 2.3 s once under CI)
    times = []
    for _ in range(3):
        start = time.process_time()
        assert _is_png(write_run_plot(tmp_path))
        times.append(time.process_time() - start)
    assert min(times) < 2.0, times


# ------------------------------------------------------------------ the ETA of the run


def test_eta_from_steps_only() -> None:
    eta = run_eta(step=10, total_steps=100, start_step=0, elapsed_s=20.0)
    assert eta == Eta(180.0, "steps") and str(eta) == "ETA 03:00"


def test_eta_before_the_first_step_is_unknown_without_a_budget() -> None:
    assert run_eta(step=0, total_steps=100, start_step=0, elapsed_s=1.0) == Eta(None, "steps")
    assert str(Eta(None)) == "ETA ?"


def test_eta_from_the_budget_only() -> None:
    eta = run_eta(step=0, total_steps=100, start_step=0, elapsed_s=15.0, budget_s=60.0)
    assert eta == Eta(45.0, "budget") and str(eta) == "ETA 00:45 (time budget)"


def test_eta_is_the_earlier_of_steps_and_budget() -> None:
    # 1 s per step, 90 steps left: the run ends on steps within a 200 s budget, on time within 50 s
    assert run_eta(step=10, total_steps=100, start_step=0, elapsed_s=10.0, budget_s=200.0) == Eta(90.0, "steps")
    assert run_eta(step=10, total_steps=100, start_step=0, elapsed_s=10.0, budget_s=50.0) == Eta(40.0, "budget")
    assert run_eta(step=10, total_steps=100, start_step=0, elapsed_s=70.0, budget_s=50.0) == Eta(0.0, "budget")


def test_eta_after_a_resume_counts_only_this_calls_steps() -> None:
    # resumed at 50; 10 steps in 10 s -> 40 steps left take 40 s (not 40 * 10/60 s)
    assert run_eta(step=60, total_steps=100, start_step=50, elapsed_s=10.0) == Eta(40.0, "steps")
    assert run_eta(step=60, total_steps=100, start_step=50, elapsed_s=10.0, budget_s=25.0) == Eta(15.0, "budget")


def test_the_bar_shows_our_eta_instead_of_tqdms() -> None:
    eta = run_eta(step=30, total_steps=100, start_step=20, elapsed_s=10.0, budget_s=30.0)
    line = tqdm.format_meter(30, 100, 10.0, ncols=100, prefix="train", bar_format=BAR_FORMAT, initial=20,
                             postfix=f"{eta}, loss 1.2345")
    assert "30/100 [00:10, ETA 00:20 (time budget), loss 1.2345]" in line
    assert "<" not in line  # tqdm's own remaining time (from the step rate only) is not shown


def test_trainer_bar_starts_at_the_resumed_step_and_shows_the_eta(tmp_path: Path, monkeypatch) -> None:
    import muppets.progress as progress

    bars = []

    class Recording(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["file"] = _Sink()
            super().__init__(*args, **kwargs)
            bars.append(self)

    monkeypatch.setattr(progress, "tqdm", Recording)
    monkeypatch.setattr(progress, "is_terminal", lambda stream: True)  # as on a terminal
    Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=2, checkpoint_every=2), tmp_path).train(resume=False)
    config = toy_config(steps=4, max_minutes=60.0, progress=True)
    Trainer(ToyModel(), ToyData(8, 2), config, tmp_path).train()  # resumes at step 2
    assert bars[-1].initial == 2 and bars[-1].n == 4
    assert bars[-1].postfix.startswith("ETA ") and "loss" in bars[-1].postfix


def test_trainer_bar_on_a_redirected_stderr_draws_nothing(tmp_path: Path, capfd, caplog) -> None:
    """Not a terminal: no bar and no progress lines (the trainer logs its own ``log_every`` steps)."""
    with caplog.at_level(logging.INFO, logger="muppets.progress"):
        Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=2, progress=True), tmp_path).train(resume=False)
    assert "\r" not in capfd.readouterr().err and not [r for r in caplog.records if r.name == "muppets.progress"]


class _Sink:
    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass


def test_doctests() -> None:
    import doctest

    import muppets.train.progress as progress

    assert doctest.testmod(plots).failed == 0 and doctest.testmod(progress).failed == 0
