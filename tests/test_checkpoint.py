"""Checkpoints: layout, atomic write, pruning, exact round trip (ties, optimizer, RNG), typed errors."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toy_train import ToyData, ToyModel  # noqa: E402

from muppets.errors import CheckpointError  # noqa: E402
from muppets.train import (  # noqa: E402
    CHECKPOINT_FILES,
    TrainerState,
    build_optimizer,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from muppets.train.checkpoint import capture_rng, restore_rng  # noqa: E402


def _trained_model_and_optimizer(seed: int = 0):
    model = ToyModel(dropout=0.0, seed=seed)
    optimizer, names = build_optimizer(model, lr=1e-2, weight_decay=0.01, betas=[0.9, 0.999], eps=1e-6)
    data = ToyData(8, 1)
    for step in range(2):
        batch = data.micro_batches(step, 0, 1)[0]
        out = model(**batch)
        (out.loss_sums["mlm"] + out.loss_sums["cls"]).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer, names


def _save(root: Path, step: int, keep: int = 3, seed: int = 0) -> Path:
    model, optimizer, names = _trained_model_and_optimizer(seed)
    state = TrainerState(step=step, tokens_seen=96, elapsed_s=1.5, world_size=1,
                         train_config={"lr": 0.01}, run_config={"model": {"hidden": 8}})
    return save_checkpoint(root, model, optimizer, names, state, capture_rng(), keep=keep)


def test_round_trip_restores_weights_ties_optimizer_and_rng(tmp_path: Path) -> None:
    model, optimizer, names = _trained_model_and_optimizer()
    state = TrainerState(step=2, tokens_seen=96, elapsed_s=1.5, run_config={"model": {"hidden": 8}})
    path = save_checkpoint(tmp_path, model, optimizer, names, state, capture_rng())
    expected_draws = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])

    fresh = ToyModel(dropout=0.0, seed=99)
    fresh_opt, fresh_names = build_optimizer(fresh, lr=1.0, weight_decay=0.5, betas=[0.5, 0.5], eps=1e-3)
    loaded, rng = load_checkpoint(path, fresh, fresh_opt, fresh_names)

    for key, value in model.state_dict().items():
        assert torch.equal(value, fresh.state_dict()[key]), key
    assert fresh.out.weight is fresh.embed.weight  # the tie survives loading
    saved_state, new_state = optimizer.state_dict(), fresh_opt.state_dict()
    for index, entries in saved_state["state"].items():
        for name, value in entries.items():
            assert torch.equal(value, new_state["state"][index][name]), (index, name)
    assert new_state["param_groups"][0]["betas"] == (0.9, 0.999)
    assert new_state["param_groups"][0]["weight_decay"] == 0.01
    assert (loaded.step, loaded.tokens_seen, loaded.elapsed_s) == (2, 96, 1.5)
    assert loaded.run_config == {"model": {"hidden": 8}}
    restore_rng(rng)
    assert torch.equal(torch.rand(3), expected_draws[0])
    assert np.array_equal(np.random.rand(3), expected_draws[1])
    assert [random.random() for _ in range(3)] == expected_draws[2]


def test_layout_latest_pointer_and_pruning(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        path = _save(tmp_path, step, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000002", "step-00000003"]
    assert (tmp_path / "latest").read_text().strip() == "step-00000003"
    assert sorted(p.name for p in path.iterdir()) == sorted(CHECKPOINT_FILES)
    with safe_open(str(path / "model.safetensors"), "pt") as fh:
        keys = set(fh.keys())
    assert len({"embed.weight", "out.weight"} & keys) == 1  # tied tensor stored once
    with safe_open(str(path / "optimizer.safetensors"), "pt") as fh:
        assert "state.0.exp_avg" in fh.keys() and "state.0.step" in fh.keys()
    with safe_open(str(path / "rng.safetensors"), "pt") as fh:
        assert fh.get_tensor("torch.cpu").dtype == torch.uint8
    state = json.loads((path / "trainer_state.json").read_text())
    assert state["step"] == 3 and set(state["rng"]) == {"numpy", "python"}
    # overwriting an existing step directory is atomic too
    _save(tmp_path, 3, keep=2)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_killed_saves_leftovers_go_with_the_next_save_and_an_only_copy_stays(tmp_path: Path) -> None:
    import subprocess

    from muppets.config import _HOST_TAG

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs (the writer was killed)
    here = f"h{_HOST_TAG}"
    half = tmp_path / f".tmp-step-00000062-{here}.{dead.pid}"
    half.mkdir(parents=True)
    (half / "model.safetensors").write_bytes(b"\0" * 128)
    (tmp_path / f".latest.k2x9_qab.{here}.{dead.pid}.tmp").write_text("step-00000062\n")  # atomic_path's
    moved_aside = tmp_path / f".old-step-00000001-{here}.{dead.pid}"  # killed between the renames of a re-save
    moved_aside.mkdir()
    elsewhere = tmp_path / f".tmp-step-00000063-h000000.{dead.pid}"  # another host's save, maybe still running
    elsewhere.mkdir()
    _save(tmp_path, 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["latest", "step-00000001", moved_aside.name,
                                                                  elsewhere.name])
    elsewhere.rmdir()
    _save(tmp_path, 2)  # step 1 exists again: the copy moved aside is no longer the only one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000001", "step-00000002"]


def test_latest_falls_back_to_newest_complete_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    _save(root, 1)
    _save(root, 2)
    (root / "latest").write_text("step-00000009\n")
    assert latest_checkpoint(tmp_path) == root / "step-00000002"
    (root / "step-00000002" / "rng.safetensors").unlink()
    assert latest_checkpoint(tmp_path) == root / "step-00000001"


def test_missing_file_names_directory_and_file(tmp_path: Path) -> None:
    path = _save(tmp_path, 1)
    (path / "optimizer.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"step-00000001.*optimizer\.safetensors"):
        load_checkpoint(path, ToyModel())
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope", ToyModel())


def test_mismatched_model_names_the_key(tmp_path: Path) -> None:
    path = _save(tmp_path, 1)

    class Renamed(ToyModel):
        def __init__(self) -> None:
            super().__init__()
            self.extra = torch.nn.Linear(2, 2)

    with pytest.raises(CheckpointError, match=r"step-00000001.*missing key 'extra\.(bias|weight)'"):
        load_checkpoint(path, Renamed())

    wider = ToyModel()
    wider.cls = torch.nn.Linear(8, 3)
    with pytest.raises(CheckpointError, match=r"(?s)model\.safetensors.*cls\.weight"):
        load_checkpoint(path, wider)


def test_mismatched_optimizer_names_the_parameter(tmp_path: Path) -> None:
    path = _save(tmp_path, 1)
    model = ToyModel()
    optimizer, names = build_optimizer(model, lr=1e-2, weight_decay=0.01, betas=[0.9, 0.999], eps=1e-6)
    names[0][0] = "renamed.weight"
    with pytest.raises(CheckpointError, match=r"optimizer\.json.*'embed\.weight'.*'renamed\.weight'"):
        load_checkpoint(path, model, optimizer, names)


def test_corrupt_json_is_a_checkpoint_error(tmp_path: Path) -> None:
    path = _save(tmp_path, 1)
    (path / "trainer_state.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="trainer_state.json"):
        load_checkpoint(path, ToyModel())


def test_nothing_is_ever_unpickled() -> None:
    source = Path(__file__).resolve().parents[1] / "src" / "muppets" / "train"
    banned = re.compile(r"(?<![\w.])torch\.(load|save)\(|\bpickle\b|_object\(")
    for file in source.glob("*.py"):
        match = banned.search(file.read_text())
        assert match is None, f"{file.name} uses {match.group(0)}"
