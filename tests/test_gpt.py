"""GPT / GPT-2: tiny random configs, hand-computed loss, parity with transformers' GPT2LMHeadModel
and OpenAIGPTLMHeadModel (both directions), KV cache == recompute (with left padding), and
generation: greedy and beam search identical to transformers' ``generate``, sampling seeded."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from muppets.errors import CheckpointError, ConfigError
from muppets.generate import (GenerationConfig, _settled, filter_logits, generate, generate_text,
                              left_pad, penalise_repetition)
from muppets.interop.hf_gpt import load_hf_gpt, save_hf_gpt
from muppets.models.gpt import GPT_PRESETS, GPTConfig, GPTLanguageModel

V = 99


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def tiny(variant: str = "gpt2", init: float = 0.3, **kw) -> GPTLanguageModel:
    """A random model whose next-token distributions are peaked enough for greedy/beam tests."""
    torch.manual_seed(0)
    cfg = GPTConfig(variant=variant, vocab_size=V, max_position_embeddings=64, hidden_size=32,
                    num_layers=2, num_heads=4, intermediate_size=128, initializer_range=init,
                    hidden_act="gelu_new" if variant == "gpt2" else "gelu", **kw)
    return GPTLanguageModel(cfg).eval()


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    model = tiny()
    path = save_hf_gpt(model, tmp_path_factory.mktemp("gpt2"))
    return model, transformers.AutoModelForCausalLM.from_pretrained(path).eval()


# ----------------------------------------------------------------------------- model


def test_presets_and_config_errors():
    cfg = GPTConfig.preset("gpt-mini")
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.variant) == (4, 256, 4, "gpt2")
    gpt1 = GPTConfig.preset("gpt")
    assert (gpt1.variant, gpt1.max_position_embeddings, gpt1.hidden_act) == ("gpt", 512, "gelu")
    assert GPTConfig.preset("gpt2").eos_token_id == 50256
    assert set(GPT_PRESETS) >= {"gpt-mini", "gpt2", "gpt2-medium"}
    with pytest.raises(ConfigError, match="variant"):
        GPTConfig(variant="gpt3")
    with pytest.raises(ConfigError, match="preset"):
        GPTConfig.preset("gpt-huge")


def test_shapes_layers_and_gpt2_residual_init():
    model = GPTLanguageModel(GPTConfig.preset("gpt-tiny", vocab_size=V, initializer_range=0.02))
    ids = torch.randint(0, V, (3, 7))
    out = model.eval()(ids)
    assert out.logits.shape == (3, 7, V) and len(out.encoded.layers) == 3
    std = 0.02 / math.sqrt(2 * 2)
    assert model.backbone.layers[0].attn.out.weight.std().item() == pytest.approx(std, rel=0.15)
    assert model.backbone.layers[0].attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.15)
    assert model.backbone.embeddings.tokens.weight is model.lm_weight  # tied
    assert tiny("gpt").backbone.final_norm is None


def test_causal_attention_ignores_the_future():
    model = tiny()
    ids = torch.randint(0, V, (2, 10))
    changed = ids.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % V
    with torch.no_grad():
        a, b = model(ids).logits, model(changed).logits
    assert torch.allclose(a[:, :6], b[:, :6], atol=1e-6) and not torch.allclose(a[:, 6:], b[:, 6:])


def test_fused_loss_equals_cross_entropy_on_logits():
    model = tiny(init=0.02)
    ids = torch.randint(0, V, (3, 9))
    labels = ids.clone()
    labels[0, 5:] = -100
    with torch.no_grad():
        out = model(ids, labels=labels)
        logits = model(ids).logits
    ref = F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), reduction="sum")
    assert out.counts["lm"].item() == 3 * 8 - 4
    assert out.loss_sums["lm"].item() == pytest.approx(ref.item(), rel=1e-5)
    hits = (logits[:, :-1].argmax(-1) == labels[:, 1:]).sum().item()
    assert out.correct["lm"].item() == hits


def test_loss_gradients_match_the_unfused_path():
    model = tiny(init=0.02).train()
    for m in model.modules():  # no dropout: compare the two paths exactly
        if hasattr(m, "dropout") and isinstance(m.dropout, float):
            m.dropout = 0.0
    model.cfg.hidden_dropout = 0.0
    for block in model.backbone.layers:
        block.cfg.hidden_dropout = 0.0
    ids = torch.randint(0, V, (2, 8))
    model(ids, labels=ids).loss_sums["lm"].backward()
    fused = model.lm_weight.grad.clone()
    model.zero_grad()
    logits = model(ids).logits
    F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1), reduction="sum").backward()
    assert torch.allclose(fused, model.lm_weight.grad, atol=1e-5)


# ----------------------------------------------------------------------------- KV cache


def test_kv_cache_equals_recompute_token_by_token_and_in_chunks():
    model = tiny()
    ids = torch.randint(0, V, (2, 12))
    with torch.no_grad():
        full = model(ids).logits  # (2, 12, V)
        cache = model.backbone.new_cache(2, 20)
        steps = [model.next_token_logits(ids[:, :5], None, cache)]
        steps += [model.next_token_logits(ids[:, t:t + 1], None, cache) for t in range(5, 9)]
        steps.append(model.next_token_logits(ids[:, 9:], None, cache))  # a 3-token chunk
    for got, t in zip(steps, [4, 5, 6, 7, 8, 11]):
        assert torch.allclose(got, full[:, t], atol=1e-5)
    assert cache.length == 12


def test_output_layer_for_a_large_batch_equals_full_logits():
    """A batch of 17 rows over a vocabulary of 32,891: the copy's product gives the full logits."""
    torch.manual_seed(0)
    cfg = GPTConfig(variant="gpt2", vocab_size=4 * 8192 + 123, max_position_embeddings=16, hidden_size=16,
                    num_layers=1, num_heads=2, intermediate_size=32)
    model = GPTLanguageModel(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (17, 5))
    with torch.no_grad():
        full = model(ids).logits[:, -1]  # (B, V)
        got = model.next_token_logits(ids, None, model.backbone.new_cache(ids.shape[0], 8))
    assert got.shape == full.shape
    assert torch.allclose(got, full, atol=1e-5)


def test_kv_cache_with_left_padding_equals_each_row_alone():
    model = tiny()
    prompts = [[5, 6, 7, 8, 9], [10, 11], [3]]
    ids, mask = left_pad(prompts, pad_id=V - 1)
    with torch.no_grad():
        cache = model.backbone.new_cache(3, 10)
        first = model.next_token_logits(ids, mask, cache)
        nxt = torch.tensor([[1], [2], [4]])
        second = model.next_token_logits(nxt, None, cache)
        for i, p in enumerate(prompts):
            alone = model(torch.tensor([p + [int(nxt[i])]])).logits[0]
            assert torch.allclose(first[i], alone[-2], atol=1e-5)
            assert torch.allclose(second[i], alone[-1], atol=1e-5)


def test_cache_overflow_and_context_length_errors():
    model = tiny()
    cache = model.backbone.new_cache(1, 4)
    with torch.no_grad():
        model.next_token_logits(torch.zeros(1, 4, dtype=torch.long), None, cache)
        with pytest.raises(ValueError, match="cache"):
            model.next_token_logits(torch.zeros(1, 1, dtype=torch.long), None, cache)
        with pytest.raises(ValueError, match="max_position_embeddings"):
            model(torch.zeros(1, 65, dtype=torch.long))


# ----------------------------------------------------------------------------- HF parity


@pytest.mark.parametrize("variant", ["gpt2", "gpt"])
def test_transformers_loads_ours_and_we_load_theirs(variant, tmp_path):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    model = tiny(variant, init=0.02)
    save_hf_gpt(model, tmp_path / "ours")
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ours").eval()
    assert type(hf).__name__ == {"gpt2": "GPT2LMHeadModel", "gpt": "OpenAIGPTLMHeadModel"}[variant]
    ids = torch.randint(0, V, (3, 11))
    with torch.no_grad():
        ours, theirs = model(ids).logits, hf(ids).logits
        assert (ours - theirs).abs().max().item() <= 1e-5
        out = model(ids, labels=ids)
        assert (out.loss_sums["lm"] / out.counts["lm"]).item() == pytest.approx(hf(ids, labels=ids).loss.item(), rel=1e-5)
    hf.save_pretrained(tmp_path / "theirs")
    back = load_hf_gpt(tmp_path / "theirs").eval()
    with torch.no_grad():
        assert torch.allclose(back(ids).logits, theirs, atol=1e-5)
    assert back.cfg == model.cfg


def test_loading_bad_directories_names_the_problem(tmp_path):
    with pytest.raises(CheckpointError, match="config.json"):
        load_hf_gpt(tmp_path)
    model = tiny()
    save_hf_gpt(model, tmp_path / "m")
    cfg_file = tmp_path / "m" / "config.json"
    text = cfg_file.read_text()
    cfg_file.write_text(text.replace('"model_type": "gpt2"', '"model_type": "bert"'))
    with pytest.raises(CheckpointError, match="model_type"):
        load_hf_gpt(tmp_path / "m")
    cfg_file.write_text(text.replace('"n_layer": 2', '"n_layer": 3'))
    with pytest.raises(CheckpointError, match="missing weights"):
        load_hf_gpt(tmp_path / "m")


# ----------------------------------------------------------------------------- generation


PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [3, 4, 5, 6]]


def _hf_generate(hf, prompts, **kw):
    ids, mask = left_pad(prompts, V - 1)
    out = hf.generate(ids, attention_mask=mask.long(), pad_token_id=V - 1, do_sample=False, **kw)
    return [[t for t in row if t != V - 1] for row in out[:, ids.shape[1]:].tolist()]


@pytest.mark.parametrize("penalty", [1.0, 1.3])
def test_greedy_batched_equals_transformers_generate(hf_pair, penalty):
    model, hf = hf_pair
    ours = generate(model, PROMPTS, GenerationConfig(max_new_tokens=12, stop_at_eos=False,
                                                     repetition_penalty=penalty))
    assert ours == _hf_generate(hf, PROMPTS, max_new_tokens=12, eos_token_id=None,
                                repetition_penalty=penalty)
    alone = [generate(model, [p], GenerationConfig(max_new_tokens=12, stop_at_eos=False,
                                                   repetition_penalty=penalty))[0] for p in PROMPTS]
    assert alone == ours  # left padding changes nothing


@pytest.mark.parametrize("length_penalty,penalty", [(1.0, 1.0), (0.5, 1.0), (2.0, 1.3)])
def test_beam_search_equals_transformers(hf_pair, length_penalty, penalty):
    model, hf = hf_pair
    cfg = GenerationConfig(max_new_tokens=10, num_beams=3, length_penalty=length_penalty,
                           repetition_penalty=penalty)
    theirs = _hf_generate(hf, PROMPTS, max_new_tokens=10, num_beams=3, length_penalty=length_penalty,
                          repetition_penalty=penalty, eos_token_id=V - 1, early_stopping=False)
    assert generate(model, PROMPTS, cfg) == theirs


class Scripted(torch.nn.Module):
    """A fake LM that proposes ``script[row][step]`` (one-hot-ish log-probs) at each step."""

    def __init__(self, script: list[list[int]], eos: int = V - 1) -> None:
        super().__init__()
        self.script, self.step = script, 0
        self.cfg = GPTConfig(vocab_size=V, hidden_size=8, num_layers=1, num_heads=1, eos_token_id=eos)
        self.backbone = GPTLanguageModel(self.cfg).backbone

    def next_token_logits(self, ids, mask, cache):
        B = ids.shape[0]
        rows = len(self.script)
        logits = torch.full((B, V), -5.0)
        for b in range(B):
            plan = self.script[b * rows // B]
            logits[b, plan[min(self.step, len(plan) - 1)]] = 5.0
        self.step += 1
        return logits


def test_eos_ends_each_row_and_finished_rows_wait():
    eos = V - 1
    model = Scripted([[1, 2, eos, 3], [4, 5, 6, 7, 8], [eos]])
    assert generate(model, PROMPTS, GenerationConfig(max_new_tokens=6)) == [[1, 2], [4, 5, 6, 7, 8, 8], []]
    model.step = 0
    assert generate(model, PROMPTS, GenerationConfig(max_new_tokens=3, stop_at_eos=False)) == \
        [[1, 2, eos], [4, 5, 6], [eos, eos, eos]]


def test_beam_search_finishes_at_eos():
    eos = V - 1
    model = Scripted([[1, 2, eos], [4, eos]])
    out = generate(model, [[3], [4, 5]], GenerationConfig(max_new_tokens=10, num_beams=2))
    assert out == [[1, 2], [4]]


def test_sampling_is_seeded_and_filters():
    model = tiny(init=0.05)
    cfg = GenerationConfig(max_new_tokens=15, do_sample=True, top_k=20, top_p=0.9, temperature=0.8,
                           seed=7, stop_at_eos=False)
    a, b = generate(model, PROMPTS, cfg), generate(model, PROMPTS, cfg)
    assert a == b and all(len(x) == 15 for x in a)
    other = generate(model, PROMPTS, GenerationConfig(**{**cfg.__dict__, "seed": 8}))
    assert other != a
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]])
    top2 = filter_logits(logits, GenerationConfig(top_k=2))
    assert torch.isinf(top2[0, 2:]).all() and torch.isfinite(top2[0, :2]).all()
    p = logits.softmax(-1)[0]  # 0.636, 0.234, 0.086, ...
    nucleus = filter_logits(logits, GenerationConfig(top_p=0.8))  # 0.636 < 0.8 <= 0.87
    assert torch.isfinite(nucleus[0, :2]).all() and torch.isinf(nucleus[0, 2:]).all()
    assert p[0] < 0.8 <= p[0] + p[1]
    assert torch.allclose(filter_logits(logits, GenerationConfig(temperature=2.0)), logits / 2)


def test_repetition_penalty_by_hand():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0]])
    seen = torch.tensor([[0, 1, 3]])
    mask = torch.tensor([[True, True, False]])  # token 3 is padding: not penalised
    out = penalise_repetition(logits, seen, mask, 2.0)
    assert out.tolist() == [[1.0, -2.0, 0.5, 3.0]]


def test_stop_check_and_on_token():
    model = tiny()
    seen = []
    cut = generate(model, PROMPTS, GenerationConfig(max_new_tokens=8, stop_at_eos=False),
                   on_token=lambda r, t: seen.append((r, t)), should_stop=lambda r, toks: len(toks) == 3)
    free = generate(model, PROMPTS, GenerationConfig(max_new_tokens=3, stop_at_eos=False))
    assert cut == free and sorted(seen) == sorted((r, t) for r, row in enumerate(free) for t in row)


class CharTokenizer:
    """ids = code points (a toy stand-in for the byte-level BPE in tests)."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) % V for c in text]

    def decode(self, ids) -> str:
        return "".join(chr(97 + i % 26) for i in ids)


def test_generate_text_stop_strings_and_streaming():
    model = tiny()
    tok = CharTokenizer()
    free = generate_text(model, tok, ["abc", "xy"], GenerationConfig(max_new_tokens=12, stop_at_eos=False))
    stop = free[0][3:5]
    chunks: dict[int, str] = {0: "", 1: ""}
    cfg = GenerationConfig(max_new_tokens=12, stop_at_eos=False, stop=[stop])
    out = generate_text(model, tok, ["abc", "xy"], cfg, stream=lambda r, s: chunks.__setitem__(r, chunks[r] + s))
    assert out[0] == free[0][:free[0].index(stop)]
    assert out[1] == (free[1][:free[1].index(stop)] if stop in free[1] else free[1])
    assert chunks == {0: out[0], 1: out[1]}  # streamed text == returned text, stop never shown
    assert _settled("hello wor", ["world"]) == "hello "  # may be the start of a stop string
    assert _settled("ab\ufffd", []) == "ab"


def test_config_errors():
    with pytest.raises(ConfigError, match="top_p"):
        GenerationConfig(top_p=0.0)
    with pytest.raises(ConfigError, match="beam"):
        GenerationConfig(num_beams=2, do_sample=True)
    with pytest.raises(ConfigError, match="prompt"):
        generate(tiny(), [[]])


def test_decode_weight_copy_follows_weight_updates():
    model = tiny(init=0.02)
    ids = torch.randint(0, V, (2, 5))

    def both():
        with torch.no_grad():
            cached = model.next_token_logits(ids, None, model.backbone.new_cache(2, 8))
            return cached, model(ids).logits[:, -1]

    a, ref = both()
    assert torch.allclose(a, ref, atol=1e-5)
    with torch.no_grad():
        model.lm_weight.mul_(1.5)  # in place (an optimizer step): the copy must be remade
    b, ref = both()
    assert torch.allclose(b, ref, atol=1e-5) and not torch.allclose(a, b)
    model.load_state_dict({k: v * 0.5 for k, v in model.state_dict().items()})
    c, ref = both()
    assert torch.allclose(c, ref, atol=1e-5)


def test_generation_stops_at_the_last_position():
    model = tiny()  # 64 positions
    out = generate(model, [[1] * 60], GenerationConfig(max_new_tokens=10, stop_at_eos=False))
    assert len(out[0]) == 4
    with pytest.raises(ConfigError, match="positions"):
        generate(model, [[1] * 64], GenerationConfig(max_new_tokens=1))


def test_greedy_argmax_equals_torch_argmax_including_ties_tails_and_nan():
    from muppets.generate import greedy_argmax
    from muppets.nn.decode import ARGMAX_BLOCK

    g = torch.Generator().manual_seed(0)
    V = 5 * ARGMAX_BLOCK + 37  # a partial tail block
    x = torch.randn(7, V, generator=g)
    x[1, 3] = x[1, 4 * ARGMAX_BLOCK + 1] = 50.0  # a tie across blocks: the first wins
    x[2, ARGMAX_BLOCK + 5] = x[2, ARGMAX_BLOCK + 9] = 50.0  # a tie inside a block
    x[3, V - 1] = 50.0  # the maximum in the last column of the tail
    x[4, V - 30] = 50.0  # inside the tail
    x[5] = float("-inf")  # nothing allowed
    x[6, 2 * ARGMAX_BLOCK] = float("nan")  # argmax's NaN rule
    assert torch.equal(greedy_argmax(x), x.argmax(-1))
    assert greedy_argmax(x)[1] == 3 and greedy_argmax(x)[3] == V - 1
    small = torch.randn(3, ARGMAX_BLOCK + 1, generator=g)  # too narrow for two blocks: plain argmax
    assert torch.equal(greedy_argmax(small), small.argmax(-1))
    strided = torch.randn(V, 4, generator=g).t()  # not contiguous
    assert torch.equal(greedy_argmax(strided), strided.argmax(-1))
