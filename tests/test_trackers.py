"""Experiment trackers (muppets.train.trackers): a tiny Trainer run reports to MLflow's file
store, W&B offline and TensorBoard, and each one's own reader gives back log.jsonl's numbers
and the run's config; a resume goes on in the same tracker runs; a missing extra is one error
naming it; report_to is checked and overridable like any setting."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import struct
import sys
import time
import zlib
from pathlib import Path

import pytest
import torch

from _toy_train import ToyData, ToyModel, toy_config
from muppets.config import apply_overrides, load_typed, to_dict
from muppets.errors import ConfigError
from muppets.train import Trainer, TrainConfig, read_log, trackers
from muppets.train.trackers import IDS_FILE, TrackedRun, mlflow_key, open_trackers

EVERY = 2  # log_every and eval_every of the runs
OFFLINE = {"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_ALLOW_FILE_STORE": "true", "WANDB_MODE": "offline",
           "WANDB_ERROR_REPORTING": "false"}  # what the trackers set in the process's environment


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without the variables the trackers set, and leaves them as they were."""
    for name in OFFLINE:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def _evaluate(model: torch.nn.Module) -> dict[str, float]:
    return {"bias": float(model.cls.bias.sum())}  # moves with training: each evaluation's value differs


def _train(run_dir: Path, report_to: list[str], resume: bool | Path = True):
    cfg = toy_config(steps=4, log_every=EVERY, eval_every=EVERY, checkpoint_every=EVERY, keep_checkpoints=0,
                     report_to=report_to, tensorboard=None, plot=False)
    run_config = {"model": "toy", "train": to_dict(cfg)}
    trainer = Trainer(ToyModel(), ToyData(8, 2), cfg, run_dir, evaluate=_evaluate, run_config=run_config)
    return trainer.train(resume=resume), run_config


def _reported(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """``{name: [(step, value)]}`` that log.jsonl says the trackers got: every number of the
    evaluation records, and of the step records every ``log_every`` steps."""
    out: dict[str, list[tuple[int, float]]] = {}
    for record in read_log(run_dir):
        if "loss" in record and record["step"] % EVERY:
            continue
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)):
                out.setdefault(key, []).append((record["step"], value))
    return out


# ----------------------------------------------------------------------------- the trackers' own readers


def _mlflow(run_dir: Path) -> tuple[object, object]:
    from mlflow.tracking import MlflowClient

    ids = json.loads((run_dir / IDS_FILE).read_text())["mlflow"]
    client = MlflowClient(tracking_uri=(run_dir / "mlruns").as_uri())
    return client, client.get_run(ids["run_id"])


def _mlflow_scalars(client, run) -> dict[str, list[tuple[int, float]]]:
    names = run.data.metrics
    return {k: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)) for k in names}


def _wandb_records(path: Path):
    """The protobuf records of an offline run's ``.wandb`` file (wandb's LevelDB-style log: a
    7-byte file header, then 32 KiB blocks of chunks ``crc32 | length | type | data``)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, parts = path.read_bytes(), 7, []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 0:
            break
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc
        parts.append(chunk)
        if kind in (1, 4):  # a full record, or the last chunk of one
            yield wandb_internal_pb2.Record.FromString(b"".join(parts))
            parts = []


def _wandb(run_dir: Path) -> tuple[dict, dict, list[str]]:
    """Scalars ``{name: [(step, value)]}`` and config of every offline run directory (in order), and their run ids."""
    scalars: dict[str, list[tuple[int, float]]] = {}
    config: dict = {}
    files = sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    for path in files:
        for record in _wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "history":
                step = record.history.step.num
                for item in record.history.item:
                    key = item.key or "/".join(item.nested_key)  # (wandb nests a name with a /)
                    if not key.startswith("_"):
                        scalars.setdefault(key, []).append((step, json.loads(item.value_json)))
            updates = record.run.config.update if kind == "run" else record.config.update if kind == "config" else []
            config.update({i.key: json.loads(i.value_json) for i in updates if not i.key.startswith("_")})
    return scalars, config, [path.stem.removeprefix("run-") for path in files]


def _tensorboard(run_dir: Path) -> tuple[dict[str, list[tuple[int, float]]], list[str]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    tags = events.Tags()
    return {t: [(e.step, e.value) for e in events.Scalars(t)] for t in tags["scalars"]}, tags["tensors"]


# ----------------------------------------------------------------------------- tests


def test_a_run_reports_log_jsonl_numbers_and_its_config_to_every_tracker(tmp_path: Path) -> None:
    result, run_config = _train(tmp_path / "run", ["mlflow", "wandb", "tensorboard"])
    assert {name: os.environ.get(name) for name in OFFLINE} == OFFLINE  # the switches that keep them offline
    run_dir = tmp_path / "run"
    expected = _reported(run_dir)
    assert {"loss", "loss/mlm", "lr", "eval/bias"} <= expected.keys() and len(expected["eval/bias"]) == 2
    assert expected["loss"] == [(2, result.losses[1]), (4, result.losses[3])]

    client, run = _mlflow(run_dir)
    assert _mlflow_scalars(client, run) == {mlflow_key(k): v for k, v in expected.items()}
    assert run.info.status == "FINISHED" and run.info.run_name == "/".join(run_dir.resolve().parts[-2:])
    assert run.data.params["model"] == "toy" and run.data.params["train.lr"] == "0.01"
    assert run.data.params["train.report_to"] == '["mlflow", "wandb", "tensorboard"]'
    artifact = Path(client.download_artifacts(run.info.run_id, "config.json", str(tmp_path)))
    assert json.loads(artifact.read_text()) == run_config

    scalars, config, ids = _wandb(run_dir)
    assert scalars == expected and config == run_config
    assert ids == [json.loads((run_dir / IDS_FILE).read_text())["wandb"]["id"]]

    board, texts = _tensorboard(run_dir)
    assert board.keys() == expected.keys() and "config/text_summary" in texts
    for key, points in expected.items():  # TensorBoard keeps float32
        assert [s for s, _ in board[key]] == [s for s, _ in points]
        assert [v for _, v in board[key]] == pytest.approx([v for _, v in points], rel=1e-6)

    plain, _ = _train(tmp_path / "plain", [])  # reporting moves no random stream
    assert plain.losses == result.losses and not (tmp_path / "plain" / IDS_FILE).exists()


def test_a_resumed_run_goes_on_in_the_same_tracker_runs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run_dir = tmp_path / "run"
    first, _ = _train(run_dir, ["mlflow", "wandb", "tensorboard"])
    ids = json.loads((run_dir / IDS_FILE).read_text())
    # TensorBoard reads a folder's event files in name order: the time in whole seconds, then a
    # per-process counter (in this process "...10" sorts before "...9"): a resume within the
    # same second as the first run could be read first, as no real resume is
    time.sleep(1.05)
    with caplog.at_level("WARNING", logger="muppets.train.logger"):  # as if killed after step 4, before its checkpoint
        again, _ = _train(run_dir, ["mlflow", "wandb", "tensorboard"],
                          resume=run_dir / "checkpoints" / "step-00000002")
    assert again.losses == first.losses[2:]
    assert "dropped steps 3-4" in caplog.text and "mlflow and wandb cannot" in caplog.text
    assert json.loads((run_dir / IDS_FILE).read_text()) == ids

    client, run = _mlflow(run_dir)
    loss = _mlflow_scalars(client, run)["loss"]
    assert [s for s, _ in loss] == [2, 4, 4] and loss[1] == loss[2]  # both attempts' step 4, the same loss
    assert run.info.status == "FINISHED" and len(client.search_runs([run.info.experiment_id])) == 1
    scalars, _, wandb_ids = _wandb(run_dir)
    assert set(wandb_ids) == {ids["wandb"]["id"]} and [s for s, _ in scalars["loss"]][-1] == 4
    assert [s for s, _ in _tensorboard(run_dir)[0]["loss"]] == [2, 4]  # TensorBoard hides the first step 4

    offline = sorted(run_dir.glob("wandb/offline-run-*"))
    done, _ = _train(run_dir, ["mlflow", "wandb"])  # finished: nothing to report, no tracker run opened
    assert done.losses == [] and sorted(run_dir.glob("wandb/offline-run-*")) == offline


@pytest.mark.parametrize("extra", ["mlflow", "wandb"])
def test_a_missing_extra_is_one_error_that_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     extra: str) -> None:
    monkeypatch.setitem(sys.modules, extra, None)  # as if not installed: importing it raises ImportError
    hint = re.escape(f"pip install 'muppets[{extra}]'")
    with pytest.raises(ConfigError, match=hint) as error:
        TrainConfig(report_to=[extra])
    assert error.value.key == "report_to"
    with pytest.raises(ConfigError, match=hint):
        open_trackers([extra], TrackedRun(tmp_path, "run"))


def test_a_store_mlflow_cannot_open_stops_the_run_before_its_first_step(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    with pytest.raises(ConfigError, match="tracking_uri: MLflow cannot use file:") as error:
        open_trackers(["mlflow"], TrackedRun(tmp_path / "run", "run", tracking_uri=str(tmp_path / "a-file")))
    assert error.value.key == "tracking_uri" and not (tmp_path / "run").exists()


def test_report_to_is_checked_read_from_tensorboard_and_set_by_overrides() -> None:
    from muppets.multitask.config import MultitaskConfig
    from muppets.recipes.bert_pretrain import PretrainConfig
    from muppets.transfer import feature_based, finetune

    for bad, key in [(dict(report_to=["mlfow"]), "report_to"), (dict(report_to=["none", "wandb"]), "report_to"),
                     (dict(report_to=["wandb", "wandb"]), "report_to"),
                     (dict(tracking_uri="http://localhost:5000"), "tracking_uri")]:
        with pytest.raises(ConfigError) as error:
            TrainConfig(**bad)
        assert error.value.key == key
    assert TrainConfig().report_to == ["tensorboard"] and TrainConfig(tensorboard=False).report_to == []
    alias = TrainConfig(report_to=["wandb"], tensorboard=True)
    assert alias.report_to == ["wandb", "tensorboard"] and alias.tensorboard is None
    assert TrainConfig(report_to=["none"], tensorboard=True).report_to == ["tensorboard"]

    pretrain = apply_overrides(PretrainConfig(), ["train.report_to=[mlflow]", "train.tracking_uri=runs/mlruns"])
    assert pretrain.train.report_to == ["mlflow"] and pretrain.train.tracking_uri == "runs/mlruns"
    tuned = load_typed(finetune.FinetuneConfig, None, ["report_to=[mlflow, wandb]", "tracking_uri=sqlite:///m.db"])
    made = finetune.train_config(tuned, steps=10, steps_per_epoch=5)
    assert made.report_to == ["mlflow", "wandb"] and made.tracking_uri == "sqlite:///m.db"
    assert finetune.train_config(finetune.FinetuneConfig(), 10, 5).report_to == []  # fine-tuning: log.jsonl only
    features = load_typed(feature_based.FeatureConfig, None, ["report_to=[wandb]"])
    assert feature_based._train_config(features, 10, 5).report_to == ["wandb"]
    multitask = apply_overrides(MultitaskConfig(), ["finetune.report_to=[mlflow]"])
    assert finetune.train_config(multitask.finetune, 10, 5).report_to == ["mlflow"]
    with pytest.raises(ConfigError, match="unknown tracker 'mlfow'"):
        load_typed(finetune.FinetuneConfig, None, ["report_to=[mlfow]"])


def test_the_trackers_module_imports_no_tracker_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """mlflow, wandb and tensorboard are imported when a trainer opens its trackers, never when
    muppets.train.trackers is imported (so ``import muppets`` and the CLI pay nothing for them):
    the module loads while importing any of them fails."""
    for name in ("mlflow", "wandb", "tensorboard", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, name, None)
    spec = importlib.util.spec_from_file_location("trackers_copy", trackers.__file__)
    copy = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "trackers_copy", copy)  # (dataclasses look their module up there)
    spec.loader.exec_module(copy)
    assert copy.TRACKERS.keys() == {"tensorboard", "mlflow", "wandb"}
