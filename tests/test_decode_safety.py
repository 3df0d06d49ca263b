"""Decoding in real programs (issue 15, items 1-4 and 11): many threads at once, a forked child,
a failing call, weights written behind autograd's back, a model another thread is training.

Each test failed on the decoding path before these repairs (a per-thread helper thread that was
never stopped and hung in a forked child, ``torch.set_num_threads`` flipped at every step, copies
keyed only on version counters, ``generate`` switching the shared model to eval mode)."""

from __future__ import annotations

import os
import pickle
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from muppets.generate import GenerationConfig, generate
from muppets.models.gpt import GPTConfig, GPTLanguageModel
from muppets.nn import decode
from muppets.nn.dropout import dropout

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_backbones import full_logits_greedy  # noqa: E402

V = 211
GREEDY = GenerationConfig(max_new_tokens=10, stop_at_eos=False)
SAMPLED = GenerationConfig(max_new_tokens=10, stop_at_eos=False, do_sample=True, top_k=20, seed=3)


def tiny(seed: int = 0, dropout_p: float = 0.1) -> GPTLanguageModel:
    torch.manual_seed(seed)
    cfg = GPTConfig(variant="gpt2", vocab_size=V, max_position_embeddings=64, hidden_size=32, num_layers=2,
                    num_heads=4, intermediate_size=64, initializer_range=0.3, hidden_dropout=dropout_p,
                    embedding_dropout=dropout_p, attention_dropout=dropout_p)
    return GPTLanguageModel(cfg).eval()


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield 2
    torch.set_num_threads(before)


def fresh_thread_count() -> int:
    """The intra-op thread count a thread started now gets (torch seeds it from a process-wide value)."""
    box = []
    t = threading.Thread(target=lambda: box.append(torch.get_num_threads()))
    t.start()
    t.join()
    return box[0]


JOBS = [([[1, 2, 3]], GREEDY), ([[4, 5], [6, 7, 8, 9], [10]], GREEDY), ([[11, 12, 13]], SAMPLED),
        ([[14] * 9], GREEDY)]


def test_generate_from_8_threads_at_once_leaves_thread_settings_alone(two_threads):
    """8 threads decode one model at once (batch 1 and 3, greedy and sampled): each gets the
    tokens it gets alone; while they run and afterwards, fresh threads get the process's thread
    count and the caller keeps its own; no thread is left behind."""
    model = tiny()
    alone = [generate(model, prompts, cfg) for prompts, cfg in JOBS]
    baseline = {t.ident for t in threading.enumerate()}
    seen_fresh, results, errors = [], {}, []
    running = threading.Event()

    def worker(k: int) -> None:
        try:
            prompts, cfg = JOBS[k % len(JOBS)]
            for _ in range(3):
                results.setdefault(k, []).append(generate(model, prompts, cfg))
        except BaseException as e:  # reported below
            errors.append(e)

    def watcher() -> None:
        while running.is_set():
            seen_fresh.append(fresh_thread_count())

    running.set()
    watch = threading.Thread(target=watcher)
    watch.start()
    workers = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    running.clear()
    watch.join()
    assert not errors, errors
    for k, outs in results.items():
        assert outs == [alone[k % len(JOBS)]] * 3, k
    assert seen_fresh and set(seen_fresh) == {2}, sorted(set(seen_fresh))
    assert torch.get_num_threads() == 2 and fresh_thread_count() == 2
    assert {t.ident for t in threading.enumerate()} == baseline  # nothing started, nothing left running


def test_short_lived_threads_leave_no_thread_behind(two_threads):
    model = tiny()
    before = threading.active_count()
    for _ in range(20):
        t = threading.Thread(target=generate, args=(model, [[1, 2, 3]], GREEDY))
        t.start()
        t.join()
    del model
    assert threading.active_count() == before


def test_batched_generate_leaves_fresh_threads_their_count():
    """The order that showed the leak, in a fresh interpreter (this one's threads have decoded
    before): a batch of 8 first, then a fresh thread."""
    code = textwrap.dedent("""
        import threading, torch
        from muppets.generate import GenerationConfig, generate
        from muppets.models.gpt import GPTConfig, GPTLanguageModel
        torch.set_num_threads(2)
        torch.manual_seed(0)
        model = GPTLanguageModel(GPTConfig(vocab_size=211, max_position_embeddings=64, hidden_size=32,
                                           num_layers=2, num_heads=4, intermediate_size=64)).eval()
        generate(model, [[1, 2, 3]] * 8, GenerationConfig(max_new_tokens=10, stop_at_eos=False))
        box = []
        t = threading.Thread(target=lambda: box.append(torch.get_num_threads()))
        t.start(); t.join()
        print(box[0], torch.get_num_threads())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "2"]


def test_a_failing_call_leaves_settings_as_it_found_them(two_threads):
    model = tiny()

    def boom(row: int, token: int) -> None:
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        generate(model, [[1, 2, 3]], GREEDY, on_token=boom)
    assert torch.get_num_threads() == 2 and fresh_thread_count() == 2
    x = torch.ones(10_000)
    assert bool((dropout(x, 0.5, True) == 0).any())  # dropout is on again on this thread
    assert decode.needs_probe(model._decode)  # no generation session left open


def test_a_forked_child_generates(two_threads):
    """Generate in the parent (batch 1: the path that had a helper thread), fork, generate in the
    child: it must finish, with the parent's tokens."""
    model = tiny()
    expected = generate(model, [[1, 2, 3]], GREEDY)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: generate, send the tokens, leave without running pytest's exit code
        code = 1
        try:
            os.close(read_end)
            os.write(write_end, pickle.dumps(generate(model, [[1, 2, 3]], GREEDY)))
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], 60)
        assert ready, "the forked child did not finish generating within 60 s"
        data = b""
        while chunk := os.read(read_end, 1 << 16):
            data += chunk
        assert pickle.loads(data) == expected
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(read_end)
        with_child_gone(pid)


def with_child_gone(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def test_weights_written_through_data_are_seen():
    """An EMA-style update through ``.data`` (no version bump, same storage) between two calls:
    the second call decodes the new weights, equal to a model that never decoded."""
    model, target = tiny(0), tiny(1)
    prompt = [[1, 2, 3]]
    generate(model, prompt, GREEDY)  # builds the copies and the screen
    with torch.no_grad():
        for p, q in zip(model.parameters(), target.parameters()):
            p.data.mul_(0.0).add_(q.data)  # in place on .data: the version counter does not move
    assert model._decode.current(model.lm_weight)  # the cheap check cannot see it ...
    assert generate(model, prompt, GREEDY) == generate(target, prompt, GREEDY)  # ... the probe does
    assert generate(model, prompt, GREEDY)[0] == full_logits_greedy(target, prompt[0], 10)


def test_a_row_written_through_data_is_seen():
    """One output row rewritten through ``.data`` (e.g. a new token's embedding): caught."""
    model = tiny()
    prompt = [[1, 2, 3]]
    first = generate(model, prompt, GREEDY)[0][0]
    model.lm_weight.data[40] = 50 * model.lm_weight.data[first]  # token 40 now wins the first step
    assert generate(model, prompt, GREEDY)[0][0] == 40 != first


def test_weights_changed_drops_the_copies():
    model = tiny()
    generate(model, [[1, 2, 3]], GREEDY)
    assert model._decode is not None
    model.weights_changed()
    assert model._decode is None


def test_generate_leaves_a_training_model_in_training_mode_for_other_threads():
    """Item 11: a model in training mode, used by another thread, is never switched to eval while
    generate runs; that thread's dropout stays on; generate itself decodes without dropout (the
    tokens of eval mode) and keeps no decoding copies."""
    model = tiny(dropout_p=0.5).train()
    prompt = [[1, 2, 3]]
    expected = generate(tiny(dropout_p=0.5), prompt, GREEDY)  # the same weights in eval mode
    flags, dropped, stop = set(), [], threading.Event()

    def trainer_thread() -> None:
        while not stop.is_set():
            flags.update(m.training for m in model.modules())
            dropped.append(bool((model.backbone.embeddings(torch.tensor([[1, 2, 3, 4]])) == 0).any()))
            time.sleep(0)

    t = threading.Thread(target=trainer_thread)
    t.start()
    try:
        outs = [generate(model, prompt, GREEDY) for _ in range(20)]
    finally:
        stop.set()
        t.join()
    assert flags == {True}  # no module was ever seen in eval mode
    assert any(dropped)  # the other thread's dropout kept dropping
    assert outs == [expected] * 20
    assert model.training and model._decode is None
