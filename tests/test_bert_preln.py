"""Pre-LN BERT (``BertConfig.norm_first``): wiring, save/load round trip, and a config.json that
transformers' Auto classes refuse rather than running it as a post-LN BERT. The pre-LN block itself is the one
GPT-2 uses, checked against transformers' GPT-2 in the GPT parity tests."""

from __future__ import annotations

import json

import pytest
import torch

from muppets.interop.hf_bert import PRE_LN_MODEL_TYPE, load_hf_bert, save_hf_bert
from muppets.models.bert import BertConfig, BertForPreTraining


def tiny(norm_first: bool) -> BertForPreTraining:
    torch.manual_seed(0)
    return BertForPreTraining(BertConfig(vocab_size=50, hidden_size=16, num_layers=2, num_heads=2,
                                         intermediate_size=24, max_position_embeddings=16,
                                         norm_first=norm_first)).eval()


def test_pre_ln_blocks_and_the_final_norm_are_wired():
    model = tiny(True)
    ids = torch.randint(5, 50, (2, 7))
    enc = model.backbone(ids)
    x = model.backbone.embeddings(ids, None)
    assert torch.allclose(enc.layers[0], x)
    for block in model.backbone.layers:
        assert block.cfg.norm_first
        x = block(x, None)
    assert torch.allclose(enc.layers[1], model.backbone.layers[0](enc.layers[0], None))
    assert torch.allclose(enc.layers[-1], model.backbone.final_norm(x), atol=1e-6)  # only the top is normalised
    assert tiny(False).backbone.final_norm is None


def test_pre_ln_round_trips_and_transformers_refuses_it(tmp_path):
    model = tiny(True)
    save_hf_bert(model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == PRE_LN_MODEL_TYPE
    back = load_hf_bert(tmp_path).eval()
    assert back.cfg.norm_first
    ids = torch.randint(5, 50, (2, 7))
    assert torch.equal(back.backbone(ids).layers[-1], model.backbone(ids).layers[-1])
    transformers = pytest.importorskip("transformers")
    with pytest.raises((ValueError, KeyError)):
        transformers.AutoModel.from_pretrained(tmp_path)
