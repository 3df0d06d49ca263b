"""Two machines rehearsed on one: ``torchrun --nnodes 2`` in two network namespaces.

Each node is a namespace joined to the other by a veth pair (``scripts/netns_rehearsal.py``):
the c10d rendezvous store lives on node 0's address and gloo's connections cross the veth,
as between two hosts. Checked, against one process with the same global batch:

- BERT MLM-only and MLM+NSP pretraining, GPT pretraining and fine-tuning: equal weights
  (<= 1e-6) and equal losses after a few steps;
- an elastic restart: the worker of one node is killed (SIGKILL) mid-run; torchrun
  (``--max-restarts 1``) restarts both nodes' workers, every rank resumes from the last complete
  checkpoint (never from a half-written one left beside it), and the final weights equal an
  uninterrupted run's.

The machine must be able to make network namespaces (root and iproute2; ``scripts/setup.sh``
installs iproute2 under CI); elsewhere the tests skip saying why, and under ``CI=true`` that
skip is a failure (conftest).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from test_pretrain_e2e import _SLOW_CLI, NO_DROPOUT, Pipeline, pipeline  # noqa: F401  (the session fixture)

from muppets.cli import main as cli_main
from muppets.config import writer_tag
from muppets.train import read_log, step_losses
from muppets.train.distributed import restart_warning

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("netns_rehearsal", HERE.parent / "scripts" / "netns_rehearsal.py")
netns = importlib.util.module_from_spec(_spec)
sys.modules["netns_rehearsal"] = netns  # dataclasses look their module up there
_spec.loader.exec_module(netns)  # type: ignore[union-attr]

TOL = 1e-6
TINY_GPT = {"hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "num_layers": 2,
            "hidden_dropout": 0.0, "attention_dropout": 0.0, "embedding_dropout": 0.0}


@pytest.fixture(scope="module")
def cluster():
    reason = netns.unavailable()
    if reason is not None:
        pytest.skip(f"this machine cannot make network namespaces for the two-node rehearsal: {reason}")
    with netns.two_nodes() as made:
        yield made


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               TORCH_CPP_LOG_LEVEL="ERROR")  # not the reverse-DNS warnings of nameless hosts
    env["PYTHONPATH"] = str(HERE.parent / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _two_nodes(cluster, argv: list[str], cwd: Path, run_id: str, *, max_restarts: int = 0,
               timeout: float = 150) -> list[str]:
    """Run ``argv`` as a 2-node torchrun job; both nodes' output, after checking both succeeded."""
    logs = cwd / f"logs-{run_id}"
    logs.mkdir()
    procs = cluster.launch(argv, run_id=run_id, env=_env(), cwd=cwd, max_restarts=max_restarts, logs=logs)
    codes = cluster.wait(procs, timeout)
    outputs = [(logs / f"node{r}.log").read_text() for r in range(len(procs))]
    assert codes == [0] * len(procs), f"exit codes {codes}:\n" + "\n---\n".join(o[-3000:] for o in outputs)
    return outputs


def _joined_across_the_veth(cluster, outputs: list[str]) -> None:
    """Both workers joined a 2-process group whose master is node 0's veth address."""
    master = cluster.nodes[0].address
    for out in outputs:
        assert "of 2 (backend gloo, master " + master in out, out[-2000:]


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _losses(run_dir: Path) -> list[float]:
    losses = step_losses(run_dir)
    return [losses[s] for s in sorted(losses)]


def _equal_runs(two: Path, one: Path, steps: int) -> None:
    la, lb = _losses(two), _losses(one)
    assert len(la) == len(lb) == steps and max(abs(x - y) for x, y in zip(la, lb)) <= TOL, (la, lb)
    ckpt = f"checkpoints/step-{steps:08d}"
    assert json.loads((two / ckpt / "trainer_state.json").read_text())["world_size"] == 2
    diff = _max_diff(_weights(two / ckpt), _weights(one / ckpt))
    assert diff <= TOL, f"largest weight difference {diff:.3g} > {TOL}"


@pytest.mark.parametrize("nsp", [True, False], ids=["mlm+nsp", "mlm-only"])
def test_bert_two_nodes_equal_one_process(cluster, pipeline: Pipeline, nsp: bool) -> None:
    two, one = pipeline.root / f"nodes2-nsp{nsp:d}", pipeline.root / f"nodes1-nsp{nsp:d}"
    common = ["train.steps=3", NO_DROPOUT, f"data.nsp={str(nsp).lower()}", "train.checkpoint_every=3"]
    outputs = _two_nodes(cluster, ["-m", "muppets.cli", "pretrain", str(pipeline.config), f"run_dir={two}", *common],
                         pipeline.root, f"bert{nsp:d}")
    _joined_across_the_veth(cluster, outputs)
    assert sum(o.count("pretraining finished at step 3") for o in outputs) == 1  # rank 0 alone reports
    assert ("held-out NSP accuracy" in "".join(outputs)) == nsp
    pipeline.run(one, *common)
    _equal_runs(two, one, 3)
    norms = [[r["grad_norm"] for r in read_log(d) if "loss" in r] for d in (two, one)]
    assert max(abs(a - b) for a, b in zip(*norms)) <= TOL, norms  # Adam would hide a wrong gradient scale
    if not nsp:  # the pooler and NSP head got no gradient (DDP must not wait for one) and are exported
        import transformers

        _, info = transformers.BertForPreTraining.from_pretrained(two / "final", output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], info


def test_restart_warning_names_the_shared_store_only_when_torchrun_may_restart() -> None:
    shared = {"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_MAX_RESTARTS": "1"}
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in restart_warning(shared)
    assert restart_warning({**shared, "TORCHELASTIC_MAX_RESTARTS": "0"}) is None
    assert restart_warning({**shared, "TORCHELASTIC_USE_AGENT_STORE": "False"}) is None  # a store per round
    assert restart_warning({}) is None  # not under torchrun


def test_gpt_two_nodes_equal_one_process(cluster, pipeline: Pipeline, tmp_path: Path) -> None:
    from muppets.tokenizers.bpe import ByteLevelBPETokenizer

    texts = [line for line in (pipeline.raw / "docs.txt").read_text().splitlines() if line.strip()]
    ByteLevelBPETokenizer.train(texts, vocab_size=400, min_frequency=1).save(tmp_path / "tok")
    config = tmp_path / "gpt.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"preset": "gpt-tiny", "overrides": TINY_GPT}, "tokenizer": {"path": str(tmp_path / "tok")},
        "corpus": {"inputs": [str(pipeline.raw)], "prepared": str(tmp_path / "corpus"), "workers": 1},
        "data": {"block_size": 32, "eval_fraction": 0.1, "eval_blocks": 4},
        "train": {"steps": 3, "batch_size": 8, "lr": 1e-3, "checkpoint_every": 3, "log_every": 1,
                  "progress": False, "tensorboard": False, "threads": 1}}))
    one, two = tmp_path / "one", tmp_path / "two"
    assert cli_main(["pretrain", str(config), f"run_dir={one}", "device=cpu"]) == 0  # prepares the corpus
    outputs = _two_nodes(cluster, ["-m", "muppets.cli", "pretrain", str(config), f"run_dir={two}"], tmp_path, "gpt")
    _joined_across_the_veth(cluster, outputs)
    _equal_runs(two, one, 3)


def test_finetune_two_nodes_equal_one_process(cluster, pipeline: Pipeline, tmp_path: Path) -> None:
    model = pipeline.root / "nodes1-nsp1" / "final"  # the one-process BERT of the test above
    if not model.is_dir():
        pipeline.run(model.parent, "train.steps=3", NO_DROPOUT, "train.checkpoint_every=3")
    lines = [line for line in (pipeline.raw / "docs.txt").read_text().splitlines() if line.strip()][:48]
    rows = ["text,label"] + [f"\"{line[:120]}\",{int('the ' in line.lower())}" for line in lines]
    (tmp_path / "train.csv").write_text("\n".join(rows[:33]) + "\n")
    (tmp_path / "dev.csv").write_text("\n".join(rows[:1] + rows[33:]) + "\n")
    args = ["finetune", str(tmp_path / "train.csv"), "--dev", str(tmp_path / "dev.csv"), "--model", str(model),
            "epochs=1", "batch_size=8", "max_seq_len=32", "progress=false", "dropout=0", "lr=1e-3",
            "selection=last", "log_every=1"]
    one, two = tmp_path / "one", tmp_path / "two"
    assert cli_main([*args, f"run_dir={one}", "device=cpu"]) == 0
    outputs = _two_nodes(cluster, ["-m", "muppets.cli", *args, f"run_dir={two}"], tmp_path, "finetune")
    _joined_across_the_veth(cluster, outputs)
    final = [sorted((d / "checkpoints").glob("step-*"))[-1] for d in (two, one)]
    assert final[0].name == final[1].name == "step-00000004"  # 32 examples / global batch 8
    _equal_runs(two, one, 4)


def _worker_of(agent: subprocess.Popen, timeout: float = 30) -> int:
    """The pid of the worker that ``agent``'s torchrun started (its python child)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-P", str(agent.pid), "-f", "slow_worker.py"],
                               capture_output=True, text=True).stdout.split()
        if found:
            return int(found[0])
        time.sleep(0.05)
    raise AssertionError("no worker process found")


def test_a_killed_node_worker_restarts_and_ends_equal_to_an_uninterrupted_run(
        cluster, pipeline: Pipeline, tmp_path: Path) -> None:
    """Node 1's worker is killed after checkpoint 4 of 8; torchrun restarts both workers, they
    resume from step 4 (not from the half-written step 6 planted beside it) and end equal to
    the uninterrupted one-process run."""
    script = tmp_path / "slow_worker.py"
    script.write_text(_SLOW_CLI)  # steps after the 4th take 0.5 s: room to kill a worker
    run, one = tmp_path / "elastic", tmp_path / "one"
    common = ["train.steps=8", "train.checkpoint_every=4", NO_DROPOUT]
    procs = cluster.launch([str(script), "pretrain", str(pipeline.config), f"run_dir={run}", *common],
                           run_id="elastic", env=_env(), cwd=tmp_path, max_restarts=1, logs=tmp_path)
    try:
        victim = _worker_of(procs[1])
        ckpt = run / "checkpoints" / "step-00000004"
        deadline = time.monotonic() + 90
        while not ckpt.is_dir() and time.monotonic() < deadline and all(p.poll() is None for p in procs):
            time.sleep(0.01)
        assert ckpt.is_dir(), "the run never wrote its first checkpoint"
        os.kill(victim, signal.SIGKILL)
        # what a save killed half-way leaves: the temporary directory of a dead writer on this
        # host (muppets.config.begin_dir's name), with one file cut short
        half = run / "checkpoints" / f".tmp-step-00000006-{writer_tag().rsplit('.', 1)[0]}.{victim}"
        half.mkdir()
        (half / "model.safetensors").write_bytes((ckpt / "model.safetensors").read_bytes()[:100])
    finally:
        codes = cluster.wait(procs, 150)
    log = "\n".join((tmp_path / f"node{r}.log").read_text() for r in (0, 1))
    assert codes == [0, 0], log[-6000:]
    assert log.count(f"resumed from {ckpt} at step 4") == 2, log[-4000:]  # both ranks, from the complete one
    assert "pretraining finished at step 8" in log
    assert not half.exists()  # the half-written save was cleared, never read
    pipeline.run(one, *common)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["step"] == 8 and not summary["interrupted"]
    diff = _max_diff(_weights(run / "final"), _weights(one / "final"))
    assert diff <= TOL, f"largest weight difference {diff:.3g} > {TOL}"
    assert _losses(run) == pytest.approx(_losses(one), abs=TOL)
