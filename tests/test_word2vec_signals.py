"""word2vec stops cleanly on SIGINT/SIGTERM: `muppets word2vec train` in a subprocess, signalled once
training has started, finishes its chunks, checkpoints, exports the vectors, exits with 0 and
leaves no worker process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_hogwild import _alive
from test_word2vec import make_corpus, tiny_config, topic_docs

from muppets.models.word2vec import Word2VecModel, Word2VecTrainer, build_examples

MUPPETS = Path(sys.executable).with_name("muppets")


def _workers_of(pid: int) -> list[int]:
    """Hogwild processes (spawned by multiprocessing) whose parent is ``pid``, read from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().split(")")[-1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and b"spawn_main" in cmdline:
            found.append(int(stat.parent.name))
    return found


def _start_run(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    text = tmp_path / "text"
    text.mkdir()
    for i, doc in enumerate(topic_docs(sentences=200)):
        (text / f"d{i}.txt").write_text(" ".join(" ".join(s).capitalize() + "." for s in doc) + "\n")
    run_dir = tmp_path / "run"
    config = {"run_dir": str(run_dir), "evaluate": False, "corpus": {"inputs": [str(text)], "workers": 1},
              "word2vec": {"vector_size": 16, "window": 3, "negative": 4, "sample": 0.0, "min_count": 1,
                           "epochs": 1_000_000, "batch_size": 32, "updates_per_call": 2, "chunk_tokens": 400,
                           "backend": "eager", "workers": 2, "log_every_s": 1e9}}
    (tmp_path / "w2v.json").write_text(json.dumps(config))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([str(MUPPETS), "word2vec", "train", str(tmp_path / "w2v.json")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    return proc, run_dir


def _wait_for_training(proc: subprocess.Popen, run_dir: Path, timeout: float = 120.0) -> list[int]:
    """Wait until a chunk is logged and both workers are seen; return the workers' pids."""
    deadline = time.monotonic() + timeout
    log = run_dir / "log.jsonl"
    while time.monotonic() < deadline and proc.poll() is None:
        workers = _workers_of(proc.pid)
        if log.is_file() and log.read_text().strip() and len(workers) == 2:
            return workers
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"training did not start: {proc.communicate()[1][-3000:]}")


@pytest.mark.parametrize("signum, group", [(signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["SIGTERM-to-the-parent", "SIGINT-to-the-group (Ctrl-C)"])
def test_a_signal_stops_word2vec_with_vectors_and_checkpoint_written(tmp_path, signum, group):
    proc, run_dir = _start_run(tmp_path)
    workers = _wait_for_training(proc, run_dir)
    os.killpg(proc.pid, signum) if group else os.kill(proc.pid, signum)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]  # stopped, not finished: a following command does not run
    assert "run the same command again" in err and "to resume" in err
    assert f"word2vec stopped by {signal.Signals(signum).name}" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_early"] and summary["stopped_by"] == signal.Signals(signum).name
    assert 0 < summary["epochs_done"] < 1_000_000
    assert (run_dir / "vectors.bin").is_file() and (run_dir / "model" / "vectors.safetensors").is_file()
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    state = json.loads((run_dir / "checkpoints" / latest / "state.json").read_text())
    assert (state["epoch"], state["chunk"]) > (0, 0)  # the position reached, saved to resume from
    assert not any(_alive(pid) for pid in workers), "a Hogwild worker outlived the stopped run"


def test_a_second_signal_aborts(tmp_path):
    corpus, vocab = make_corpus(tmp_path / "c", topic_docs(sentences=60))
    examples = build_examples(corpus, tiny_config())
    model = Word2VecModel(tiny_config(), [vocab.words[i] for i in examples.vocab.corpus_ids.tolist()],
                          examples.vocab.counts)
    trainer = Word2VecTrainer(model, examples)
    trainer._on_signal(signal.SIGINT, None)  # the first: stop at the next chunk boundary
    assert trainer._stop_signal == signal.SIGINT
    with pytest.raises(KeyboardInterrupt, match="second SIGTERM"):
        trainer._on_signal(signal.SIGTERM, None)
