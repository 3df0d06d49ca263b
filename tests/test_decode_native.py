"""The compiled batch-1 decoding step (muppets.nn.decode_native): the same hidden states, cache
contents and greedy tokens as the torch step and the full logits, whatever the thread count; it
falls back where it cannot decide or cannot be built, and runs on torch's own OpenMP threads."""

from __future__ import annotations

import copy
import ctypes
import os
import sys
from pathlib import Path

import pytest
import torch

from muppets import native
from muppets.generate import GenerationConfig, generate
from muppets.models.gpt import GPTConfig, GPTLanguageModel
from muppets.nn import decode, decode_native
from muppets.nn.decode_native import GPTStep

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_backbones import full_logits_greedy, full_logits_sampled  # noqa: E402

V = 211
GREEDY = GenerationConfig(max_new_tokens=12, stop_at_eos=False)

pytestmark = pytest.mark.skipif(decode_native.load() is None and not os.environ.get("CI"),
                                reason="no C compiler here")


def tiny(variant: str = "gpt2", act: str = "gelu_new", seed: int = 0, hidden: int = 32) -> GPTLanguageModel:
    torch.manual_seed(seed)
    cfg = GPTConfig(variant=variant, vocab_size=V, max_position_embeddings=64, hidden_size=hidden, num_layers=2,
                    num_heads=4, intermediate_size=72, initializer_range=0.3, hidden_act=act)
    return GPTLanguageModel(cfg).eval()


def prefilled(model: GPTLanguageModel, prompt: list[int], room: int = 40):
    cache = model.backbone.new_cache(1, room)
    with torch.no_grad():
        model.backbone(torch.tensor([prompt]), None, cache)
    return cache


@pytest.mark.parametrize("variant,act", [("gpt2", "gelu_new"), ("gpt", "gelu"), ("gpt2", "relu")])
def test_the_compiled_step_equals_the_torch_step(threads, variant, act):
    """Hidden state, keys, values, key mask and positions of 8 steps, pre- and post-LN blocks, each
    activation; and each greedy token is the argmax of the full logits of that hidden state."""
    model = tiny(variant, act)
    plan = model._decode_weights()
    step = model._compiled_step(plan)
    assert isinstance(step, GPTStep)
    step.attach_screen(plan.exact_input_screen)
    ours, theirs = prefilled(model, [3, 1, 4, 1, 5]), prefilled(model, [3, 1, 4, 1, 5])
    with torch.no_grad():
        for token in [9, 2, 6, 5, 3, 5, 8, 9]:
            ids = torch.tensor([[token]])
            want = model.backbone.decode_step(ids, theirs, plan.weights)  # (1, H)
            got, got_token, _ = step(ids, ours, threads, greedy=True)
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), float((got - want).abs().max())
            logits = want @ model.lm_weight.t()
            assert got_token == int(logits.argmax())
            assert ours.length == theirs.length and ours.next_position.tolist() == theirs.next_position.tolist()
            assert torch.equal(ours.key_mask, theirs.key_mask)
            for a, b in zip(ours.layers, theirs.layers):
                assert a.length == b.length
                assert torch.allclose(a.k[:, :, :a.length], b.k[:, :, :b.length], atol=1e-5)
                assert torch.allclose(a.v[:, :, :a.length], b.v[:, :, :b.length], atol=1e-5)


def test_the_step_gives_the_same_bits_on_any_thread_count():
    """Each output element is summed by one thread in one order: 1, 2 and 3 threads agree exactly."""
    model = tiny(hidden=48)
    if not native.torch_uses_openmp():
        pytest.skip("torch's parallel backend is not OpenMP here: the step runs on one thread")
    plan = model._decode_weights()
    step = model._compiled_step(plan)
    step.attach_screen(plan.exact_input_screen)
    base = prefilled(model, [7, 7, 1])
    results = []
    for n in (1, 2, 3):
        cache = copy.deepcopy(base)
        outs = []
        for token in [4, 100, 17, 17]:
            outs.append(step(torch.tensor([[token]]), cache, n, greedy=True)[:2])
        for token in [5, 60]:  # top-k: the same candidates and logits
            hidden, _, (logits, ids) = step(torch.tensor([[token]]), cache, n, top_k=20)
            outs += [(hidden, None), (logits, ids.tolist())]
        results.append(outs)
    for other in results[1:]:
        for (h1, t1), (h2, t2) in zip(results[0], other):
            assert t1 == t2 and torch.equal(h1, h2)


@pytest.mark.parametrize("variant", ["gpt2", "gpt"])
def test_greedy_generation_through_the_compiled_step_equals_the_full_logits(threads, variant):
    for seed in range(3):
        model = tiny(variant, seed=seed)
        for prompt in ([5, 6, 7, 8], [9], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]):
            assert generate(model, [prompt], GREEDY) == [full_logits_greedy(model, prompt, 12)], (seed, prompt)
        step = model._decode.derived("gpt_step", lambda: None)
        assert isinstance(step, GPTStep) and step.decided == 3 * 11  # the kernel chose every token after the prompt's


def test_top_1_sampling_takes_the_compiled_step_and_equals_greedy(threads):
    model = tiny()
    sampled = generate(model, [[5, 6, 7]], GenerationConfig(max_new_tokens=12, stop_at_eos=False, do_sample=True,
                                                            top_k=1, seed=0))
    assert sampled == [full_logits_greedy(model, [5, 6, 7], 12)]


@pytest.mark.parametrize("k", [1, 5, 50, V - 1])
def test_the_compiled_top_k_candidates_hold_the_k_largest_logits(threads, k):
    """Each step's candidates: at least k, ids ascending, their logits the float32 logits of the
    step's hidden state, the k largest of those among them."""
    model = tiny(hidden=48)
    plan = model._decode_weights()
    step = model._compiled_step(plan)
    step.attach_screen(plan.exact_input_screen)
    cache = prefilled(model, [3, 1, 4])
    with torch.no_grad():
        for token in [9, 2, 6, 5, 3]:
            out = step(torch.tensor([[token]]), cache, threads, top_k=k)
            assert out.token is None and out.top is not None
            logits, ids = out.top  # (1, N), (1, N)
            full = (out.hidden @ model.lm_weight.t())[0]  # (V,)
            assert logits.shape == ids.shape and logits.shape[0] == 1 and k <= ids.shape[1] <= V
            assert bool((ids[0, 1:] > ids[0, :-1]).all())
            assert torch.allclose(logits[0], full[ids[0]], rtol=1e-5, atol=1e-5)
            assert set(full.topk(k).indices.tolist()) <= set(ids[0].tolist())
            # and exactly the torch screen's candidates (same y and bound: the int8f kernel), none more
            assert torch.equal(ids, plan.exact_input_screen().top_k(out.hidden, k)[1])
    assert step.decided == 5


@pytest.mark.parametrize("variant", ["gpt2", "gpt"])
def test_top_k_sampling_through_the_compiled_step_draws_as_the_full_logits(threads, variant):
    """Seeded top-k (with top-p and temperature) draws the tokens a full forward pass draws, with
    the kernel's candidates at every step after the prompt."""
    for seed in range(3):
        model = tiny(variant, seed=seed)
        cfg = GenerationConfig(max_new_tokens=12, stop_at_eos=False, do_sample=True, top_k=7, top_p=0.9,
                               temperature=0.8, seed=seed)
        assert generate(model, [[5, 6, 7]], cfg) == [full_logits_sampled(model, [5, 6, 7], cfg)], seed
        step = model._decode.derived("gpt_step", lambda: None)
        assert isinstance(step, GPTStep) and step.decided == 11


def test_a_top_k_the_step_does_not_take_goes_to_the_torch_screen():
    """k not below the vocabulary, or above the candidate limit, or more candidates than the limit:
    the step returns no candidates (the hidden state is still right) and the torch screen or the
    full logits decide; sampling draws the same tokens."""
    model = tiny()
    plan = model._decode_weights()
    step = model._compiled_step(plan)
    step.attach_screen(plan.exact_input_screen)
    ours, theirs = prefilled(model, [1, 2]), prefilled(model, [1, 2])
    with torch.no_grad():
        for token, k, limit in [(3, V, None), (4, V + 5, None), (5, 20, 10)]:
            step.step.max_candidates = limit or decode.SCREEN_MAX_CANDIDATES
            ids = torch.tensor([[token]])
            out = step(ids, ours, 1, top_k=k)
            assert out.top is None and out.token is None
            assert torch.allclose(out.hidden, model.backbone.decode_step(ids, theirs, plan.weights), atol=1e-5)
        step.step.max_candidates = decode.SCREEN_MAX_CANDIDATES
    cfg = GenerationConfig(max_new_tokens=12, stop_at_eos=False, do_sample=True, top_k=5, seed=1)
    with torch.no_grad():  # every output row equal: all V tokens are candidates, split between the threads
        model.lm_weight.copy_(model.lm_weight[7].expand_as(model.lm_weight))
    plan = model._decode_weights()
    step = model._compiled_step(plan)
    step.attach_screen(plan.exact_input_screen)
    assert step(torch.tensor([[6]]), prefilled(model, [1, 2]), 2, top_k=5).top[1].shape == (1, V)
    step.step.max_candidates = V - 1
    for n in (1, 2):  # one thread: its own part overflows; two: only their sum does
        assert step(torch.tensor([[6]]), prefilled(model, [1, 2]), n, top_k=5).top is None
    assert generate(model, [[1, 2]], cfg) == [full_logits_sampled(model, [1, 2], cfg)]
    assert step.decided == 1


def test_a_hidden_state_with_nan_decides_nothing(threads):
    model = tiny()
    with torch.no_grad():
        model.backbone.final_norm.weight[3] = float("nan")
    plan = model._decode_weights()
    step = model._compiled_step(plan)
    step.attach_screen(plan.exact_input_screen)
    cache = prefilled(model, [1, 2])
    for kwargs in ({"greedy": True}, {"top_k": 5}):
        out = step(torch.tensor([[3]]), cache, threads, **kwargs)
        assert out.token is None and out.top is None and bool(out.hidden.isnan().any())
    assert step.decided == 0


def test_an_undecided_screen_leaves_the_token_to_the_full_logits():
    """No candidate may be recomputed: every step returns no token, the torch screen or the full
    logits decide, and the tokens are the same."""
    model = tiny()
    plan = model._decode_weights()
    step = model._compiled_step(plan)
    step.attach_screen(plan.exact_input_screen)
    step.step.max_candidates = 0
    cache = prefilled(model, [1, 2])
    out = step(torch.tensor([[3]]), cache, 1, greedy=True)
    assert out.token is None
    assert generate(model, [[1, 2]], GREEDY) == [full_logits_greedy(model, [1, 2], 12)]
    assert step.decided == 0


def test_without_a_compiler_decoding_takes_the_torch_step(monkeypatch):
    monkeypatch.setattr(native, "compiler", lambda: None)
    model = tiny()
    assert generate(model, [[4, 5]], GREEDY) == [full_logits_greedy(model, [4, 5], 12)]
    assert model._decode.derived("gpt_step", lambda: "not made") is None  # tried once, not available
    assert decode.GreedyScreen.build(model.lm_weight, kind="int8f") is None


def test_forward_hooks_keep_the_step_on_forward():
    """A hook must see every step, so the compiled step (like the torch one) stands aside."""
    model = tiny()
    calls = []
    handle = model.backbone.layers[0].register_forward_hook(lambda *_: calls.append(1))
    try:
        got = generate(model, [[4, 5]], GREEDY)
    finally:
        handle.remove()
    assert len(calls) == 12 and got == [full_logits_greedy(model, [4, 5], 12)]


def test_a_token_outside_the_vocabulary_is_refused_and_the_cache_kept():
    model = tiny()
    cache = prefilled(model, [1, 2, 3])
    for bad in (V + 5, -1):
        with pytest.raises(IndexError, match="vocabulary"):
            model.next_token_argmax(torch.tensor([[bad]]), None, cache)
    assert cache.length == 3 and all(layer.length == 3 for layer in cache.layers)
    assert cache.next_position.tolist() == [3] and int(cache.key_mask.sum()) == 3


def test_the_step_follows_weight_changes():
    model = tiny()
    first = generate(model, [[1, 2, 3]], GREEDY)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)  # a dense update: new versions, so new copies and a new step
    assert generate(model, [[1, 2, 3]], GREEDY) == [full_logits_greedy(model, [1, 2, 3], 12)] != first


def _providing_library(handle: int, symbol: bytes) -> str:
    """The file of the library that ``symbol`` resolves to from the library ``handle`` (dlsym
    searches it, then what it was linked against)."""
    libc = ctypes.CDLL(None)
    libc.dlsym.restype, libc.dlsym.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]

    class DlInfo(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p),
                    ("saddr", ctypes.c_void_p)]

    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    address = libc.dlsym(handle, symbol)
    assert address, symbol
    info = DlInfo()
    assert libc.dladdr(address, ctypes.byref(info))
    return os.path.realpath(info.fname.decode())


def test_the_step_runs_on_torchs_own_openmp_threads():
    """The kernel's OpenMP runtime is the one torch's operators use (not another libgomp that a
    library like scikit-learn may have loaded too), and decoding adds no OS thread beyond the
    ones torch's own operators started."""
    if not native.torch_uses_openmp():
        pytest.skip("torch's parallel backend is not OpenMP here")
    torch_cpu = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    ours = decode_native.load()
    assert _providing_library(ours._handle, b"GOMP_parallel") == _providing_library(torch_cpu._handle,
                                                                                     b"GOMP_parallel")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        model = tiny()
        torch.randn(256, 256) @ torch.randn(256, 256)  # torch's pool exists
        generate(model, [[1, 2, 3]], GREEDY)
        tasks = len(os.listdir("/proc/self/task"))
        for _ in range(3):
            generate(model, [[1, 2, 3]], GREEDY)
        assert len(os.listdir("/proc/self/task")) == tasks
    finally:
        torch.set_num_threads(before)


def test_equal_logits_take_the_first_token_like_argmax(threads):
    """Every output row equal: all logits tie exactly, every token is a candidate (split between
    the threads), and the lowest id wins, as argmax picks it. (The full product is no reference
    here: its column blocks sum in different orders, so equal rows give logits an ulp apart.)"""
    model = tiny()
    with torch.no_grad():
        model.lm_weight.copy_(model.lm_weight[7].expand_as(model.lm_weight))
    cache = prefilled(model, [1, 2])
    plan = model._decode_weights()
    step = model._compiled_step(plan)
    step.attach_screen(plan.exact_input_screen)
    assert step(torch.tensor([[3]]), cache, threads, greedy=True).token == 0
    assert generate(model, [[1, 2]], GREEDY) == [[0] * 12]


def test_a_model_that_decoded_can_be_copied():
    """deepcopy (EMA teachers, distillation, checkpoints of whole modules) leaves the decoding
    copies and the compiled step behind; the copy decodes the same tokens with its own."""
    model = tiny()
    want = generate(model, [[1, 2, 3]], GREEDY)
    twin = copy.deepcopy(model)
    assert twin._decode is None and model._decode is not None
    assert generate(twin, [[1, 2, 3]], GREEDY) == want
    assert twin._decode.derived("gpt_step", lambda: None) is not model._decode.derived("gpt_step", lambda: None)


def test_the_step_follows_writes_to_norms_and_positions_through_data():
    """The step reads layer norms and position embeddings directly: a ``.data`` rebinding or an
    in-place write behind autograd's back is seen as for the linear layers."""
    model = tiny()
    generate(model, [[1, 2, 3]], GREEDY)
    model.backbone.final_norm.weight.data = torch.linspace(0.5, 2.0, 32)  # new storage
    assert generate(model, [[1, 2, 3]], GREEDY) == [full_logits_greedy(model, [1, 2, 3], 12)]
    model.backbone.embeddings.positions.weight.data.mul_(3.0)  # same storage, no version bump
    model.backbone.layers[1].ffn_norm.bias.data.add_(0.5)
    assert generate(model, [[1, 2, 3]], GREEDY) == [full_logits_greedy(model, [1, 2, 3], 12)]


@pytest.mark.parametrize("which", ["float64", "two-rows", "bfloat16"])
def test_a_cache_the_kernel_cannot_use_goes_to_the_torch_step(which):
    """A cache of another dtype or batch is declined (the kernel writes float32 rows of one
    sequence), and nothing is written."""
    model = tiny()
    plan = model._decode_weights()
    step = model._compiled_step(plan)
    dtype = {"float64": torch.float64, "bfloat16": torch.bfloat16}.get(which, torch.float32)
    cache = decode_native_cache(model, 2 if which == "two-rows" else 1, dtype)
    assert not step.accepts(torch.tensor([[3]]), cache)
    assert step.accepts(torch.tensor([[3]]), model.backbone.new_cache(1, 8))
    assert not step.accepts(torch.tensor([[3]], dtype=torch.int32), model.backbone.new_cache(1, 8))


def decode_native_cache(model: GPTLanguageModel, rows: int, dtype: torch.dtype):
    from muppets.nn.kv_cache import KVCache

    cfg = model.cfg
    return KVCache(rows, cfg.num_layers, cfg.num_heads, cfg.head_dim, 16, dtype)


def test_a_cache_is_not_kept_alive_by_the_step():
    import gc
    import weakref

    model = tiny()
    cache = prefilled(model, [1, 2])
    model.next_token_argmax(torch.tensor([[3]]), None, cache)
    ref = weakref.ref(cache.layers[0].k)
    del cache
    gc.collect()
    assert ref() is None
