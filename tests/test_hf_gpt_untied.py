"""Hugging Face GPT-2 directories that muppets' tied GPT cannot represent are refused, not loaded
with other logits (issue 15, item 7), and ``config.json`` is checked against the safetensors
headers before the model is built, so a crafted config cannot force a huge allocation (item 8)."""

from __future__ import annotations

import json
import time

import pytest
import torch
from safetensors.torch import load_file, save_file

from muppets.errors import CheckpointError
from muppets.interop.hf_gpt import load_hf_gpt

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    transformers.logging.set_verbosity_error()
    yield


def hf_gpt2(directory, tie: bool = True):
    """A tiny random ``GPT2LMHeadModel`` saved to ``directory`` (and returned in eval mode)."""
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=99, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                                  bos_token_id=98, eos_token_id=98, tie_word_embeddings=tie)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    model.save_pretrained(directory)
    return model


def edit_config(directory, **changes) -> None:
    path = directory / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_untied_head_is_refused_naming_file_and_key(tmp_path):
    hf_gpt2(tmp_path, tie=False)
    assert "lm_head.weight" in load_file(tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model\.safetensors: lm_head\.weight differs from "
                                              r"transformer\.wte\.weight \(an untied output layer\)"):
        load_hf_gpt(tmp_path)


def test_untied_head_is_refused_even_when_config_says_tied(tmp_path):
    """transformers keeps a stored head that differs from wte untied, whatever the config says."""
    hf_gpt2(tmp_path, tie=False)
    edit_config(tmp_path, tie_word_embeddings=True)
    with pytest.raises(CheckpointError, match=r"lm_head\.weight differs"):
        load_hf_gpt(tmp_path)


def test_untied_config_without_a_head_is_refused(tmp_path):
    hf_gpt2(tmp_path, tie=True)
    edit_config(tmp_path, tie_word_embeddings=False)
    with pytest.raises(CheckpointError, match=r"config\.json: tie_word_embeddings is false"):
        load_hf_gpt(tmp_path)


@pytest.mark.parametrize("store_head", [False, True])
def test_tied_checkpoint_loads_with_transformers_logits(tmp_path, store_head):
    hf = hf_gpt2(tmp_path, tie=True)
    if store_head:  # some exporters write the tied head out: lm_head.weight == wte
        weights = load_file(tmp_path / "model.safetensors")
        weights["lm_head.weight"] = weights["transformer.wte.weight"].clone()
        save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    ours = load_hf_gpt(tmp_path).eval()
    ids = torch.randint(0, 99, (2, 9))
    with torch.no_grad():
        assert (ours(ids).logits - hf(ids).logits).abs().max().item() <= 1e-5


@pytest.mark.parametrize("key, value", [("vocab_size", 10**15), ("n_positions", 10**15),
                                        ("n_embd", 2**44), ("n_inner", 10**15)])
def test_crafted_config_is_refused_before_allocating(tmp_path, key, value):
    hf_gpt2(tmp_path)
    edit_config(tmp_path, **{key: value, "n_head": 1})
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=r"model\.safetensors: .* has shape .*config\.json implies"):
        load_hf_gpt(tmp_path)
    assert time.perf_counter() - start < 2.0


def test_crafted_layer_count_is_refused_before_building(tmp_path):
    hf_gpt2(tmp_path)
    edit_config(tmp_path, n_layer=10**7)
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=r"missing weights: .*config\.json sets 10000000 layers, "
                                              r"the weights hold 2"):
        load_hf_gpt(tmp_path)
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize("key, value", [("n_layer", "2"), ("n_head", 0), ("n_embd", -32), ("n_inner", 1.5)])
def test_config_sizes_must_be_positive_integers(tmp_path, key, value):
    hf_gpt2(tmp_path)
    edit_config(tmp_path, **{key: value})
    with pytest.raises(CheckpointError, match=rf"config\.json: {key} must be a positive integer"):
        load_hf_gpt(tmp_path)


def test_unreadable_config_is_a_checkpoint_error(tmp_path):
    hf_gpt2(tmp_path)
    (tmp_path / "config.json").write_bytes(b"{\"model_type\": \"gpt2\", ")
    with pytest.raises(CheckpointError, match=r"config\.json.*invalid JSON \(truncated\?\)"):
        load_hf_gpt(tmp_path)


def test_a_config_json_with_a_byte_order_mark_loads_and_latin1_is_named(tmp_path):
    hf_gpt2(tmp_path)
    path = tmp_path / "config.json"
    text = path.read_bytes()
    path.write_bytes(b"\xef\xbb\xbf" + text)  # saved by a Windows editor
    load_hf_gpt(tmp_path)
    path.write_bytes(text.replace(b'"gpt2"', b'"gpt\xe92"'))
    with pytest.raises(CheckpointError, match=r"config\.json:\d+ \(byte \d+\): JSON file is not valid UTF-8"):
        load_hf_gpt(tmp_path)
