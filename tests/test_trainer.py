"""The shared Trainer: schedule, AdamW groups, loss normalisation, logs, exact resume in a new
process, SIGTERM, NaN handling and 2-process DDP == 1 process. Toy model: ``_toy_train.py``."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from safetensors.torch import load_file

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _toy_train import HIDDEN, ToyData, ToyModel, toy_config  # noqa: E402

from muppets.config import to_dict  # noqa: E402
from muppets.errors import ConfigError, TrainingDiverged  # noqa: E402
from muppets.train import (  # noqa: E402
    Trainer,
    build_optimizer,
    lr_factor,
    param_groups,
    read_log,
    step_losses,
)

SCRIPT = HERE / "_toy_train.py"


@pytest.fixture(autouse=True)
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    src = str(HERE.parent / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run_script(*args: str, timeout: float = 60) -> dict:
    out = Path(args[0]).with_suffix(".json")
    cmd = [sys.executable, str(SCRIPT), *args, "--out", str(out)]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def _train(run_dir: Path, dropout: float = 0.1, data: ToyData | None = None, **overrides) -> tuple[Trainer, object]:
    config = toy_config(**overrides)
    data = data or ToyData(config.batch_size, config.accumulation)
    trainer = Trainer(ToyModel(dropout=dropout), data, config, run_dir)
    return trainer, trainer.train(resume=False)


def _params(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


# ------------------------------------------------------------------ building blocks


def test_schedule_is_a_pure_function_of_step() -> None:
    kw = dict(total_steps=20, warmup_steps=10)
    assert [lr_factor(s, **kw) for s in (1, 5, 10)] == [0.1, 0.5, 1.0]
    assert lr_factor(20, **kw, schedule="linear") == 0.0
    assert lr_factor(15, **kw, schedule="linear") == pytest.approx(0.5)
    assert lr_factor(15, **kw, schedule="cosine") == pytest.approx(0.5)
    assert lr_factor(20, **kw, schedule="cosine", min_lr_ratio=0.1) == pytest.approx(0.1)
    assert lr_factor(20, **kw, schedule="constant") == 1.0
    assert lr_factor(1, total_steps=1) == 0.0 and lr_factor(1, total_steps=2) == 0.5
    with pytest.raises(ConfigError, match="'step'"):
        lr_factor(1, total_steps=2, schedule="step")


def test_no_weight_decay_on_biases_norms_and_1d_params() -> None:
    groups, names = param_groups(ToyModel(), 0.01)
    assert names[0] == ["embed.weight", "proj.weight", "cls.weight"]  # tied out.weight counted once
    assert names[1] == ["norm.weight", "norm.bias", "proj.bias", "out.bias", "cls.bias"]
    assert [g["weight_decay"] for g in groups] == [0.01, 0.0]


def test_optimizer_kernel_matches_reference_adamw() -> None:
    a, b = ToyModel(dropout=0.0), ToyModel(dropout=0.0)
    fast, _ = build_optimizer(a, lr=1e-2, weight_decay=0.01, betas=[0.9, 0.999], eps=1e-6)
    groups, _ = param_groups(b, 0.01)
    ref = torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.999), eps=1e-6, foreach=False)
    data = ToyData(8, 1)
    for step in range(5):
        for model, opt in ((a, fast), (b, ref)):
            out = model(**data.micro_batches(step, 0, 1)[0])
            (out.loss_sums["mlm"] + out.loss_sums["cls"]).backward()
            opt.step()
            opt.zero_grad()
    assert _max_diff(a.state_dict(), b.state_dict()) < 1e-6


def test_config_errors_are_typed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="schedule"):
        toy_config(schedule="exp")
    with pytest.raises(ConfigError, match="batch_size"):
        toy_config(batch_size=0)
    with pytest.raises(ConfigError, match="trim_heap_seconds"):
        toy_config(trim_heap_seconds=-1)
    with pytest.raises(ConfigError, match="batch_size=10 is not divisible"):
        Trainer(ToyModel(), ToyData(10, 4), toy_config(batch_size=10, accumulation=4), tmp_path)


def test_heap_trimming_between_steps_changes_nothing_but_memory(tmp_path: Path, monkeypatch, caplog) -> None:
    import platform

    from muppets import heap

    calls: list[int] = []
    real = heap._release_function()
    if platform.libc_ver()[0] == "glibc":
        assert real is not None  # the real malloc_trim (or tcmalloc's release) is found

    def counted():
        calls.append(0)
        return real() if real is not None else None

    monkeypatch.setattr(heap, "_release_function", lambda: counted)
    with caplog.at_level("INFO", logger="muppets.train.trainer"):
        _, trimmed = _train(tmp_path / "trim", steps=6, trim_heap_seconds=1e-9)
    assert calls == [0] * 6  # after every step (the interval is shorter than a step)
    assert "heap trimmed 6 times" in caplog.text
    calls.clear()
    _, untrimmed = _train(tmp_path / "off", steps=6, trim_heap_seconds=0)
    assert calls == [] and trimmed.losses == untrimmed.losses
    assert _max_diff(_params(tmp_path / "trim" / "checkpoints" / "step-00000006"),
                     _params(tmp_path / "off" / "checkpoints" / "step-00000006")) == 0.0


# ------------------------------------------------------------------ loss normalisation


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def test_accumulation_equals_one_big_batch(tmp_path: Path) -> None:
    small = ToyData(32, 4)
    mlm_counts = [small.normalizers(b)["mlm"] for b in small.micro_batches(0, 0, 1)]
    assert len(set(mlm_counts)) > 1  # counts differ between micro-batches: mean-of-means is wrong
    accumulated, _ = _train(tmp_path / "a", dropout=0.0, steps=1, batch_size=32, accumulation=4)
    single, _ = _train(tmp_path / "b", dropout=0.0, steps=1, batch_size=32, accumulation=1)
    assert _max_diff(accumulated.model.state_dict(), single.model.state_dict()) <= 1e-6
    three_a, res_a = _train(tmp_path / "c", dropout=0.0, steps=3, batch_size=32, accumulation=4)
    three_b, res_b = _train(tmp_path / "d", dropout=0.0, steps=3, batch_size=32, accumulation=1)
    assert _max_diff(three_a.model.state_dict(), three_b.model.state_dict()) <= 1e-6
    assert max(abs(x - y) for x, y in zip(res_a.losses, res_b.losses)) <= 1e-6

    # The gradient the trainer accumulates equals the big batch's; naive mean-of-means differs.
    trainer = Trainer(ToyModel(dropout=0.0), small, toy_config(batch_size=32, accumulation=4), tmp_path / "e")
    batches = trainer._micro_batches()
    trainer._forward_backward(batches, trainer._global_counts(batches)[0])
    exact = _grads(trainer.model)
    big = ToyModel(dropout=0.0)
    out = big(**ToyData(32, 1).micro_batches(0, 0, 1)[0])
    (out.loss_sums["mlm"] / sum(mlm_counts) + out.loss_sums["cls"] / 32).backward()
    naive = ToyModel(dropout=0.0)
    for batch in batches:
        out = naive(**batch)
        n = small.normalizers(batch)
        ((out.loss_sums["mlm"] / n["mlm"] + out.loss_sums["cls"] / n["cls"]) / 4).backward()
    assert _max_diff(exact, _grads(big)) <= 1e-6
    assert _max_diff(exact, _grads(naive)) > 1e-3


# ------------------------------------------------------------------ logs, eval, export


def test_logs_eval_checkpoints_and_export(tmp_path: Path) -> None:
    seen = []

    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        seen.append((model.training, torch.is_grad_enabled()))
        torch.rand(5)  # must not disturb the training RNG stream
        return {"score": 0.5}

    def export(model: torch.nn.Module, path: Path) -> None:
        (path / "weights.txt").write_text(str(sum(p.numel() for p in model.parameters())))

    config = toy_config(steps=4, eval_every=2, checkpoint_every=2, keep_checkpoints=1,
                        log_every=2, tensorboard=True)
    trainer = Trainer(ToyModel(), ToyData(8, 2), config, tmp_path, evaluate=evaluate,
                      run_config={"model": "toy"}, save_model=export)
    result = trainer.train()
    assert seen == [(False, False), (False, False)] and trainer.model.training
    assert result.step == 4 and len(result.losses) == 4 and result.last_eval == {"score": 0.5}
    assert result.checkpoint == tmp_path / "checkpoints" / "step-00000004" and not result.stopped_early
    assert [p.name for p in (tmp_path / "checkpoints").iterdir() if p.is_dir()] == ["step-00000004"]
    records = read_log(tmp_path)
    steps = [r for r in records if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert {"loss", "loss/mlm", "loss/cls", "lr", "grad_norm", "tokens_per_s", "elapsed_s"} <= steps[0].keys()
    assert all(abs(r["loss"] - r["loss/mlm"] - r["loss/cls"]) < 1e-9 for r in steps)
    assert [r["step"] for r in records if "eval/score" in r] == [2, 4]
    assert list(step_losses(tmp_path).values()) == result.losses
    assert json.loads((tmp_path / "config.json").read_text()) == {"model": "toy"}
    assert (tmp_path / "model" / "weights.txt").is_file()
    events = sorted((tmp_path / "tb").iterdir())
    assert events
    again = Trainer(ToyModel(), ToyData(8, 2), config, tmp_path, evaluate=evaluate,
                    run_config={"model": "toy"}, save_model=export).train()
    assert again.losses == [] and sorted((tmp_path / "tb").iterdir()) == events  # nothing to log: no new event file
    _, plain = _train(tmp_path / "no-eval", steps=4)  # evaluation leaves the losses unchanged
    assert plain.losses == result.losses


# ------------------------------------------------------------------ resume, signals, NaN


def test_resume_in_new_process_equals_uninterrupted(tmp_path: Path) -> None:
    _, full = _train(tmp_path / "full", steps=6)
    first = _run_script(str(tmp_path / "split"), "--steps", "6", "--signal-at", "2")
    assert first["stopped_early"] and first["step"] == 3
    assert first["checkpoint"].endswith("step-00000003")
    second = _run_script(str(tmp_path / "split"), "--steps", "6", "--resume", "latest")
    assert second["step"] == 6 and not second["stopped_early"]
    resumed = first["losses"] + second["losses"]
    assert len(resumed) == 6
    assert max(abs(a - b) for a, b in zip(resumed, full.losses)) <= 1e-6
    assert list(step_losses(tmp_path / "split").values()) == resumed
    ckpt = "checkpoints/step-00000006"
    assert _max_diff(_params(tmp_path / "full" / ckpt), _params(tmp_path / "split" / ckpt)) <= 1e-6


def test_sigterm_from_outside_checkpoints_and_returns(tmp_path: Path) -> None:
    run_dir, out = tmp_path / "run", tmp_path / "run.json"
    cmd = [sys.executable, str(SCRIPT), str(run_dir), "--steps", "100000", "--sleep", "0.02", "--out", str(out)]
    proc = subprocess.Popen(cmd, env=_env(), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while len(read_log(run_dir)) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "trainer did not start"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["stopped_early"] and 2 <= result["step"] < 100000
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    assert result["checkpoint"] == str(run_dir / "checkpoints" / latest)
    assert latest == f"step-{result['step']:08d}"
    assert read_log(run_dir)[-1] == {"step": result["step"], "checkpoint": result["checkpoint"]}


def test_nan_stops_without_update_and_names_last_good_checkpoint(tmp_path: Path) -> None:
    handler = signal.getsignal(signal.SIGTERM)
    config = toy_config(steps=8, checkpoint_every=2)
    trainer = Trainer(ToyModel(), ToyData(8, 2, nan_at=4), config, tmp_path)
    good = tmp_path / "checkpoints" / "step-00000004"
    with pytest.raises(TrainingDiverged, match=f"step 5 .*{good}"):
        trainer.train()
    assert trainer.step == 4 and good.is_dir()
    assert not (tmp_path / "checkpoints" / "step-00000005").exists()
    saved = _params(good)
    live = trainer.model.state_dict()
    assert _max_diff(saved, {k: live[k] for k in saved}) == 0.0  # the bad update was not applied
    assert all(p.grad is None for p in trainer.model.parameters())
    assert signal.getsignal(signal.SIGTERM) is handler


def test_resume_from_missing_path_is_a_checkpoint_error(tmp_path: Path) -> None:
    from muppets.errors import CheckpointError

    trainer = Trainer(ToyModel(), ToyData(8, 2), toy_config(), tmp_path)
    with pytest.raises(CheckpointError, match="nowhere"):
        trainer.train(resume=tmp_path / "nowhere")


# ------------------------------------------------------------------ the run directory is never overwritten


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("files", [
    {"config.json": '{"name": "my experiment", "lr": 3}', "log.jsonl": '{"note": "keep me"}\n'},
    {"config.json": "not json at all"},
    {"log.jsonl": '{"step": 1, "loss": 2.0}\n'},
], ids=["a-users-config-and-log", "unreadable-config", "a-log-alone"])
def test_a_fresh_run_refuses_files_it_did_not_write(tmp_path: Path, files: dict[str, str]) -> None:
    from muppets.errors import RunDirError

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    before = _snapshot(tmp_path)
    trainer = Trainer(ToyModel(), ToyData(8, 2), toy_config(), tmp_path)
    with pytest.raises(RunDirError, match="choose another run_dir"):
        trainer.train(resume=True)
    assert _snapshot(tmp_path) == before


def test_fresh_refuses_an_earlier_runs_checkpoints_and_leaves_them(tmp_path: Path) -> None:
    from muppets.errors import RunDirError

    _train(tmp_path, steps=2, checkpoint_every=1)
    before = _snapshot(tmp_path)
    with pytest.raises(RunDirError, match="holds the checkpoints of an earlier run"):
        Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=2), tmp_path).train(resume=False)
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("left", ["log.jsonl", "final", "summary.json"])
def test_a_trained_run_whose_checkpoints_were_deleted_is_not_started_again(tmp_path: Path, left: str) -> None:
    import shutil

    from muppets.errors import RunDirError

    _train(tmp_path, steps=6, checkpoint_every=3)
    shutil.rmtree(tmp_path / "checkpoints")
    if left != "log.jsonl":  # the log alone, or what a finished pretraining run leaves beside an empty log
        (tmp_path / "log.jsonl").write_text("")
        (tmp_path / left).mkdir() if left == "final" else (tmp_path / left).write_text("{}")
    before = _snapshot(tmp_path)
    for resume in (True, False):
        with pytest.raises(RunDirError, match=f"holds what an earlier run trained .*{left}"):
            Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=6, lr=5e-3), tmp_path).train(resume=resume)
    assert _snapshot(tmp_path) == before and not list(tmp_path.glob("config.step-*"))


def test_a_run_stopped_before_its_first_checkpoint_starts_again(tmp_path: Path) -> None:
    trainer = Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=3, checkpoint_every=0), tmp_path)
    trainer._prepare(True)  # config.json and log.jsonl written, then the process "dies"
    trainer._log.close()
    assert (tmp_path / "config.json").is_file() and not (tmp_path / "checkpoints").exists()
    result = Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=3, checkpoint_every=0), tmp_path).train(resume=True)
    assert result.step == 3


def test_a_finished_run_refuses_other_settings_but_not_other_pacing(tmp_path: Path, caplog) -> None:
    from muppets.errors import RunDirError

    trainer = Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=2), tmp_path, evaluate=lambda m: {"score": 0.5},
                      run_config={"train": to_dict(toy_config(steps=2)), "data": {"max_seq_len": 128}})
    trainer.train(resume=False)
    again = Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=2), tmp_path,
                    run_config={"train": to_dict(toy_config(steps=2)), "data": {"max_seq_len": 128}}).train(resume=True)
    assert again.losses == [] and again.last_eval == {"score": 0.5}  # asked again: the evaluation it ended with
    before = _snapshot(tmp_path)
    with pytest.raises(RunDirError, match=r"finished at step 2.*train\.seed: 7 -> 8"):
        Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=2, seed=8), tmp_path).train(resume=True)
    with pytest.raises(RunDirError, match=r"finished at step 2.*data\.max_seq_len: 128 -> 64"):  # not only train.*
        Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=2), tmp_path,
                run_config={"train": to_dict(toy_config(steps=2)), "data": {"max_seq_len": 64}}).train(resume=True)
    assert _snapshot(tmp_path) == before
    result = Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=2, threads=2, log_every=5), tmp_path).train(resume=True)
    assert result.step == 2 and "changed settings: train.log_every: 0 -> 5; train.threads: 1 -> 2" in caplog.text


def test_resuming_with_other_settings_keeps_the_old_config(tmp_path: Path, caplog) -> None:
    _train(tmp_path, steps=4, checkpoint_every=2, keep_checkpoints="all")
    checkpoints = sorted((tmp_path / "checkpoints").glob("step-*"))
    (tmp_path / "checkpoints" / "latest").write_text(checkpoints[0].name)  # as if stopped at step 2
    old = json.loads((tmp_path / "config.json").read_text())
    Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=4, checkpoint_every=2, lr=5e-3, keep_checkpoints="all"),
            tmp_path).train(resume=True)
    assert "changed settings: train.lr: 0.01 -> 0.005" in caplog.text
    assert json.loads((tmp_path / "config.step-00000002.json").read_text()) == old
    assert json.loads((tmp_path / "config.json").read_text())["train"]["lr"] == 5e-3


def test_a_checkpoint_that_no_longer_fits_names_the_settings_that_changed(tmp_path: Path) -> None:
    from muppets.errors import CheckpointError

    def run(model: ToyModel, tasks: list[str]) -> Trainer:
        return Trainer(model, ToyData(8, 2), toy_config(steps=4, checkpoint_every=2, keep_checkpoints="all"),
                       tmp_path, run_config={"tasks": tasks})

    run(ToyModel(), ["rte"]).train(resume=False)
    (tmp_path / "checkpoints" / "latest").write_text("step-00000002")  # as if stopped at step 2
    before = _snapshot(tmp_path)
    wider = ToyModel()
    wider.cls = nn.Linear(HIDDEN, 3)  # what another task list builds: a head of another size
    with pytest.raises(CheckpointError, match=r"other settings \(tasks: \['rte'\] -> \['rte', 'mrpc'\]\).*"
                                              r"size mismatch for cls\.weight.*\(2 tensors differ\)\)$"):
        run(wider, ["rte", "mrpc"]).train(resume=True)
    with pytest.raises(CheckpointError, match=r"does not fit ToyModel: size mismatch for cls\.weight") as caught:
        run(wider, ["rte"]).train(resume=True)  # the same settings: the checkpoint's own error
    assert "other settings" not in str(caught.value) and "\n" not in str(caught.value)
    assert _snapshot(tmp_path) == before
    weights = tmp_path / "checkpoints" / "step-00000002" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # damaged, not mismatched: its own error, settings aside
    with pytest.raises(CheckpointError, match="unreadable safetensors") as caught:
        run(wider, ["rte", "mrpc"]).train(resume=True)
    assert "other settings" not in str(caught.value)


# ------------------------------------------------------------------ DDP


def test_two_process_ddp_equals_one_process(tmp_path: Path) -> None:
    args = ["--steps", "4", "--batch", "8", "--accumulation", "2", "--dropout", "0"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(SCRIPT), str(tmp_path / "ddp"), *args, "--out", str(tmp_path / "ddp.json")]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=80)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp = json.loads((tmp_path / "ddp.json").read_text())
    assert ddp["world"] == 2
    _, single = _train(tmp_path / "one", dropout=0.0, steps=4, batch_size=8, accumulation=2)
    assert max(abs(a - b) for a, b in zip(ddp["losses"], single.losses)) <= 1e-5
    # Adam hides a wrong gradient scale in the parameters; the logged gradient norm does not.
    norms = [[r["grad_norm"] for r in read_log(tmp_path / d) if "loss" in r] for d in ("ddp", "one")]
    assert len(norms[0]) == 4 and max(abs(a - b) for a, b in zip(*norms)) <= 1e-5
    ckpt = "checkpoints/step-00000004"
    assert _max_diff(_params(tmp_path / "ddp" / ckpt), _params(tmp_path / "one" / ckpt)) <= 1e-5
    rng = load_file(str(tmp_path / "ddp" / ckpt / "rng.safetensors"))
    assert {"torch.cpu", "torch.cpu.rank0", "torch.cpu.rank1"} <= rng.keys()
    assert not math.isnan(ddp["losses"][-1])
    assert (tmp_path / "ddp" / "training_curves.png").is_file() and not list((tmp_path / "ddp").glob(".*.tmp"))


def _start_apart(rank: int, port: int, root: str) -> None:
    """Rank ``rank`` of 2 trains in its own ``root/rank<r>`` (as on nodes without shared storage)."""
    from muppets.errors import CheckpointError
    from muppets.train.distributed import shutdown_distributed

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    run_dir = Path(root) / f"rank{rank}"
    try:
        config = toy_config(steps=4)
        Trainer(ToyModel(dropout=0.0), ToyData(config.batch_size, config.accumulation), config, run_dir).train()
        outcome = "trained"
    except CheckpointError as err:
        outcome = str(err)
    finally:
        shutdown_distributed()
    (Path(root) / f"rank{rank}.txt").write_text(outcome, encoding="utf-8")


def test_ranks_that_find_different_checkpoints_refuse_to_start(tmp_path: Path) -> None:
    """Each rank looks for the latest checkpoint itself; when rank 0 finds one and rank 1 none
    (run_dir not on shared storage), both refuse, naming what each found."""
    import socket

    _train(tmp_path / "rank0", dropout=0.0, steps=2, checkpoint_every=2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(_start_apart, args=(port, str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        said = (tmp_path / f"rank{rank}.txt").read_text()
        assert "rank 0: step 2, rank 1: none" in said and "storage they all share" in said, said
    assert not (tmp_path / "rank1" / "checkpoints").exists()


def test_max_minutes_budget_evaluates_checkpoints_and_stops(tmp_path: Path) -> None:
    evaluated: list[int] = []

    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        evaluated.append(1)
        return {"x": 1.0}

    config = toy_config(steps=50, max_minutes=1e-9)
    trainer = Trainer(ToyModel(), ToyData(config.batch_size, config.accumulation), config, tmp_path,
                      evaluate=evaluate)
    result = trainer.train(resume=False)
    assert result.stopped_early and result.step == 1 and evaluated
    assert (tmp_path / "checkpoints" / "step-00000001").is_dir()
    again = Trainer(ToyModel(), ToyData(config.batch_size, config.accumulation),
                    toy_config(steps=3), tmp_path).train()  # resumes from the budget checkpoint
    assert again.step == 3 and not again.stopped_early


def _checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.is_dir())


def test_a_run_keeps_its_last_checkpoint_unless_asked_and_resumes_from_it(tmp_path: Path) -> None:
    """keep_checkpoints: 1, the default, leaves only the last checkpoint, which resumes the run
    exactly; N keeps the newest N, and 'all' (or 0, as before) every one."""
    from muppets.config import apply_overrides

    _, full = _train(tmp_path / "full", steps=4, checkpoint_every=1, plot=False)
    assert _checkpoints(tmp_path / "full") == ["step-00000004"]
    split = tmp_path / "split"
    first = Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=4, checkpoint_every=1, max_minutes=1e-9, plot=False),
                    split).train(resume=False)  # the time budget stops it after step 1
    assert first.step == 1 and _checkpoints(split) == ["step-00000001"]
    second = Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=4, checkpoint_every=1, plot=False), split).train()
    assert max(abs(a - b) for a, b in zip(first.losses + second.losses, full.losses, strict=True)) <= 1e-6
    assert _checkpoints(split) == ["step-00000004"]
    every = [f"step-{s:08d}" for s in range(1, 4)]
    for keep, kept in ((2, every[-2:]), ("all", every), (0, every)):
        _train(tmp_path / f"keep-{keep}", steps=3, checkpoint_every=1, keep_checkpoints=keep, plot=False)
        assert _checkpoints(tmp_path / f"keep-{keep}") == kept, keep
    assert [apply_overrides(toy_config(), [f"keep_checkpoints={v}"]).keep_checkpoints for v in ("all", "2")] == ["all", 2]
    for bad in (-1, "last", 1.5):
        with pytest.raises(ConfigError, match="keep_checkpoints"):
            toy_config(keep_checkpoints=bad)


def test_resume_drops_a_half_written_last_log_line_and_refuses_a_damaged_log(tmp_path: Path, caplog) -> None:
    """A run killed while writing log.jsonl leaves a partial last line: resuming drops it (with a
    warning) instead of failing; a bad line in the middle is a DataError naming file and line."""
    from muppets.errors import DataError
    from muppets.train.logger import RunLogger

    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n{"step": 3, "lo', encoding="utf-8")
    logger = RunLogger(tmp_path)
    with caplog.at_level("WARNING", logger="muppets.train.logger"):
        logger.truncate_after(2)
    logger.log({"step": 3, "loss": 1.0})
    logger.close()
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [1, 2, 3]
    assert any("half-written last line 3" in r.getMessage() for r in caplog.records)
    log.write_text('{"step": 1}\nnot json\n{"step": 2}\n', encoding="utf-8")
    logger = RunLogger(tmp_path)
    with pytest.raises(DataError, match=r"log.jsonl:2: not a JSON object"):
        logger.truncate_after(2)
    logger.close()


def test_frozen_parameters_stay_put_and_a_resumed_run_freezes_the_same(tmp_path: Path) -> None:
    """``frozen(step)``: those parameters are neither moved nor decayed while it names them (their
    AdamW moments untouched), they learn afterwards, and a run stopped inside the frozen phase
    resumes to the same end as one that was not."""
    def make(run_dir: Path, data: ToyData) -> Trainer:
        model = ToyModel(dropout=0.0)
        waiting = [p for name, p in model.named_parameters() if not name.startswith("cls.")]
        return Trainer(model, data, toy_config(steps=6, weight_decay=0.1, checkpoint_every=1, keep_checkpoints=0), run_dir,
                       frozen=lambda step: waiting if step < 3 else [])

    start = {k: v.clone() for k, v in ToyModel(dropout=0.0).state_dict().items()}
    full = make(tmp_path / "full", ToyData(8, 2))
    full.train(resume=False)
    third = _params(tmp_path / "full" / "checkpoints" / "step-00000003")
    for name, value in third.items():
        if name.startswith("cls."):
            assert not torch.equal(value, start[name]), name  # the head learns from the first update
        else:
            assert torch.equal(value, start[name]), name  # bit for bit, weight decay included
    fourth = _params(tmp_path / "full" / "checkpoints" / "step-00000004")
    assert not torch.equal(fourth["proj.weight"], start["proj.weight"])  # the rest joins at update 4
    assert not torch.equal(fourth["embed.weight"], start["embed.weight"])
    handler = signal.getsignal(signal.SIGTERM)
    try:
        stopped = make(tmp_path / "split", ToyData(8, 2, signal_at=1)).train(resume=False)
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert stopped.stopped_early and stopped.step == 2
    make(tmp_path / "split", ToyData(8, 2)).train(resume=True)
    ckpt = "checkpoints/step-00000006"
    assert _max_diff(_params(tmp_path / "full" / ckpt), _params(tmp_path / "split" / ckpt)) == 0.0


class _LoudExtra(ToyModel):
    """ToyModel plus a parameter outside the network whose gradient is huge (like scaled task weights)."""

    def __init__(self, exempt: bool) -> None:
        super().__init__(dropout=0.0)
        from muppets.train.optim import exempt_from_clipping

        self.extra = nn.Parameter(torch.zeros(1))
        if exempt:
            exempt_from_clipping(self.extra)

    def forward(self, **batch):
        out = super().forward(**batch)
        out.loss_sums["cls"] = out.loss_sums["cls"] + 1e7 * self.extra.sum() * len(batch["cls_labels"])
        return out


def test_a_parameter_exempt_from_clipping_neither_sets_nor_takes_the_clip(tmp_path: Path) -> None:
    """The network's update is the one it gets without the loud parameter; clipped together, the
    loud gradient would set the clip factor and shrink the network's step."""
    def first_step(model: nn.Module, name: str) -> tuple[dict[str, torch.Tensor], float]:
        trainer = Trainer(model, ToyData(8, 1), toy_config(steps=1, accumulation=1, warmup_steps=0,
                                                           clip_grad_norm=1.0, schedule="constant"), tmp_path / name)
        trainer.train(resume=False)
        log = read_log(tmp_path / name)
        return {k: v for k, v in model.state_dict().items() if k != "extra"}, log[0]["grad_norm"]

    plain, plain_norm = first_step(ToyModel(dropout=0.0), "plain")
    exempt, exempt_norm = first_step(_LoudExtra(exempt=True), "exempt")
    loud, loud_norm = first_step(_LoudExtra(exempt=False), "loud")
    assert exempt_norm == pytest.approx(plain_norm) and loud_norm > 1e6
    assert all(torch.allclose(exempt[k], plain[k], atol=1e-7) for k in plain)
    start = ToyModel(dropout=0.0).proj.weight.detach()

    def moved(state: dict[str, torch.Tensor]) -> float:
        return float((state["proj.weight"] - start).abs().max())

    assert moved(loud) < 0.5 * moved(plain)  # clipped with it, the gradients sink to Adam's ε


def test_warmup_as_long_as_the_run_is_warned(tmp_path: Path, caplog) -> None:
    """40 steps of a recipe planned with 300 warmup steps end at 13% of the peak learning rate."""
    import doctest

    from muppets.train import schedule

    with caplog.at_level("WARNING", logger="muppets.train.trainer"):
        _train(tmp_path / "short", steps=3, warmup_steps=20, plot=False)
    assert "train.warmup_steps=20 >= train.steps=3: the whole run is warmup; the learning rate ends at 15% " \
           "of train.lr and never decays" in caplog.text
    assert schedule.warmup_warning(3, 2) is None and schedule.warmup_warning(0, 5) is None
    assert doctest.testmod(schedule).failed == 0  # scale_with_steps and warmup_warning, by example
