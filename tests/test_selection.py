"""Model selection never uses the reported split (muppets.transfer.selection), and a fine-tuning
run killed between an evaluation and its checkpoint resumes into the uninterrupted run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from muppets.errors import ConfigError
from muppets.tasks.spec import TaskData
from muppets.tasks.splits import stratified_split
from muppets.train import read_log
from muppets.transfer import feature_based
from muppets.transfer.finetune import run
from muppets.transfer.selection import resolve_mode, strata

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_feature_transfer import backbones, sentiment_task  # noqa: E402,F401 - fixture reused
from test_finetune import cfg_for, model_dir, text_task, tok  # noqa: E402,F401 - fixtures reused


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


# ----------------------------------------------------------------------------- the slice


def test_stratified_slice_keeps_label_shares_and_is_seeded():
    labels = ["pos"] * 900 + ["neg"] * 100
    kept, held = stratified_split(labels, 0.1, seed=5)
    assert len(held) == 100 and Counter(labels[i] for i in held) == {"pos": 90, "neg": 10}
    assert sorted(kept + held) == list(range(1000)) and not set(kept) & set(held)
    assert stratified_split(labels, 0.1, seed=5) == (kept, held)
    assert stratified_split(labels, 0.1, seed=6)[1] != held
    # 12 items in 3 strata of 4: 10% is one item, not zero (rounding per stratum would lose it)
    assert len(stratified_split(["a", "b", "c"] * 4, 0.1, seed=0)[1]) == 1


def test_regression_strata_are_quintiles():
    values = list(np.linspace(0.0, 5.0, 100))
    assert Counter(strata("regress", values)) == {str(k): 20 for k in range(5)}
    assert set(strata("tag", [["O"]] * 3)) == {"all"}


def test_auto_mode_never_selects_on_what_it_reports():
    assert resolve_mode("auto", has_dev=True, has_test=False, epochs=3) == "train-slice"
    assert resolve_mode("auto", has_dev=True, has_test=True, epochs=3) == "dev"
    assert resolve_mode("auto", has_dev=True, has_test=False, epochs=1) == "last"
    assert resolve_mode("auto", has_dev=True, has_test=False, epochs=1, eval_every=10) == "train-slice"
    with pytest.raises(ConfigError, match="no labelled dev"):
        resolve_mode("dev", has_dev=False, has_test=False, epochs=3)
    with pytest.raises(ConfigError, match="selection"):
        resolve_mode("best-on-dev", has_dev=True, has_test=False, epochs=3)


def _flip_dev(data: TaskData) -> TaskData:
    dev = [type(ex)(ex.id, ex.text, ex.text_b, str(1 - int(ex.label)), ex.source) for ex in data["dev"]]
    return TaskData(data.spec, {"train": data["train"], "dev": dev})


def test_finetune_choice_does_not_depend_on_dev_labels(model_dir, tmp_path):
    """Flipping every dev label turns the best dev epoch into the worst. The model a train-slice
    run keeps must not move; with selection=dev (the old protocol) it does move — so this test
    would fail if dev chose."""
    data = text_task("classify", n=48)
    data = TaskData(data.spec, {"train": data["train"], "dev": data["dev"]})  # no test: auto = train-slice
    chosen = {}
    for mode in ("auto", "dev"):
        for name, task in (("dev", data), ("flipped", _flip_dev(data))):
            cfg = cfg_for(model_dir, tmp_path / f"{mode}-{name}", epochs=5, eval_every=2, lr=1e-2, selection=mode)
            summary = run(cfg, data=task)
            chosen[mode, name] = summary["best_step"], load_file(tmp_path / f"{mode}-{name}" / "best" / "model.safetensors")
            assert summary["selection"] == ("train-slice" if mode == "auto" else "dev")
    assert summary["selection_examples"] == 12
    step, weights = chosen["auto", "dev"]
    step2, weights2 = chosen["auto", "flipped"]
    assert step == step2 and all(np.array_equal(weights[k], weights2[k]) for k in weights)
    assert chosen["dev", "dev"][0] != chosen["dev", "flipped"][0]  # the control: dev did choose


def test_train_slice_is_held_out_of_training_and_dev_is_only_watched(model_dir, tmp_path):
    data = text_task("classify", n=40)
    data = TaskData(data.spec, {"train": data["train"], "dev": data["dev"]})
    summary = run(cfg_for(model_dir, tmp_path, epochs=2, watch_dev=True, selection_fraction=0.25), data=data)
    assert summary["selection"] == "train-slice" and summary["selection_examples"] == 10
    assert summary["train_examples"] == summary["train_features"] == 30
    evals = [r for r in read_log(tmp_path) if "eval/accuracy" in r]
    assert len(evals) == 2 and all("eval/dev/accuracy" in r for r in evals)
    history = json.loads((tmp_path / "early_stopping.json").read_text())["history"]
    assert [h["accuracy"] for h in history] == [r["eval/accuracy"] for r in evals]


def test_feature_based_selects_on_the_train_slice(backbones, tmp_path):
    cfg = feature_based.FeatureConfig(model=str(backbones["vectors"]), run_dir=str(tmp_path / "run"),
                                      cache_dir=str(tmp_path / "cache"), hidden=8, batch_size=8, epochs=2,
                                      progress=False, log_every=0, watch_dev=True)
    summary = feature_based.run(cfg, data=sentiment_task(n_train=40))
    assert summary["selection"] == "train-slice" and summary["selection_examples"] == 4
    assert summary["train_examples"] == 36
    assert all("eval/dev/accuracy" in r for r in read_log(tmp_path / "run") if "eval/accuracy" in r)
    one_epoch = feature_based.run(cfg.__class__(**{**cfg.__dict__, "epochs": 1, "run_dir": str(tmp_path / "one")}),
                                  data=sentiment_task(n_train=40))
    assert one_epoch["selection"] == "last" and one_epoch["train_examples"] == 40


# ----------------------------------------------------------------------------- SIGKILL + resume

SCRIPT = """
import os, signal, sys
sys.path.insert(0, {tests!r})
import muppets.transfer.finetune as ft
from muppets.tasks.spec import TaskData
from test_finetune import cfg_for, text_task
from pathlib import Path

ft.score = lambda spec, examples, predictions: {{"accuracy": 0.5}}  # constant: only patience decides
original = ft.BestKeeper.__call__

def keeper_then_kill(self, step, metrics):
    stop = original(self, step, metrics)
    if step == int(os.environ.get("KILL_AFTER_EVAL", "0")):
        os.kill(os.getpid(), signal.SIGKILL)  # after early_stopping.json, before the checkpoint
    return stop

ft.BestKeeper.__call__ = keeper_then_kill
data = text_task("classify", n=32)
data = TaskData(data.spec, {{"train": data["train"], "dev": data["dev"]}})
cfg = cfg_for(Path({model!r}), Path(sys.argv[1]), epochs=4, eval_every=2, patience=3, lr=1e-3,
              selection="train-slice", selection_fraction=0.125)
ft.run(cfg, data=data)
"""


def test_sigkill_after_an_evaluation_resumes_into_the_uninterrupted_run(model_dir, tmp_path):
    """Evaluations every 2 steps, checkpoints every 4 (the epoch): killed right after the
    evaluation at step 6, the run resumes from step 4 and evaluates step 6 again. That second
    evaluation must not count twice towards patience (3), or the run stops at 6 instead of 8."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(SCRIPT.format(tests=str(HERE), model=str(model_dir))))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    whole = subprocess.run([sys.executable, str(script), str(tmp_path / "whole")], env=env, capture_output=True)
    assert whole.returncode == 0, whole.stderr.decode()[-2000:]
    killed = subprocess.run([sys.executable, str(script), str(tmp_path / "killed")], capture_output=True,
                            env={**env, "KILL_AFTER_EVAL": "6"})
    assert killed.returncode == -9
    assert not (tmp_path / "killed" / "metrics.json").exists()
    resumed = subprocess.run([sys.executable, str(script), str(tmp_path / "killed")], env=env, capture_output=True)
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]

    def outcome(run_dir: Path):
        metrics = json.loads((run_dir / "metrics.json").read_text())
        losses = [(r["step"], r["loss"]) for r in read_log(run_dir) if "loss" in r]
        evals = [(r["step"], r["eval/accuracy"]) for r in read_log(run_dir) if "eval/accuracy" in r]
        state = json.loads((run_dir / "early_stopping.json").read_text())
        return metrics, losses, evals, state, load_file(run_dir / "best" / "model.safetensors")

    m1, losses1, evals1, state1, best1 = outcome(tmp_path / "whole")
    m2, losses2, evals2, state2, best2 = outcome(tmp_path / "killed")
    assert (m1["steps"], m1["best_step"], m1["stopped_early"]) == (8, 2, True)
    assert (m2["steps"], m2["best_step"], m2["stopped_early"]) == (8, 2, True)
    assert losses1 == losses2 and evals1 == evals2 == [(2, 0.5), (4, 0.5), (6, 0.5), (8, 0.5)]
    assert state1 == state2
    assert best1.keys() == best2.keys() and all(np.array_equal(best1[k], best2[k]) for k in best1)
