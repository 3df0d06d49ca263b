"""Tiny random RoBERTa, DistilBERT and ELECTRA directories (written by transformers, with a
tokenizer muppets trains) through what the commands call: a task model fine-tuned one step,
saved and read back (classify and tag), word embeddings (probe / embed), the attention view,
the serve engine (embeddings, fill-mask availability) and ONNX export with its check."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from _tiny_families import tiny_family_dir  # noqa: E402

from muppets import families  # noqa: E402

NAMES = ("roberta", "distilbert", "electra")


@pytest.fixture(scope="module", params=NAMES)
def model_dir(request, tmp_path_factory):
    name = request.param
    return name, tiny_family_dir(name, tmp_path_factory.mktemp(name))


@pytest.mark.parametrize("kind", ["classify", "tag"])
def test_finetune_one_step_save_and_predict(model_dir, kind, tmp_path):
    from muppets.tasks.spec import TagExample, TextExample
    from muppets.transfer.features import make_features
    from muppets.transfer.models import load_task_model, load_tokenizer, new_task_model, save_task_model

    name, directory = model_dir
    tok = load_tokenizer(directory)
    labels = ["O", "X"] if kind == "tag" else ["neg", "pos"]
    if kind == "tag":
        examples = [TagExample(id="1", tokens=["the", "river", "bank"], tags=["O", "X", "O"], source="t:1")]
    else:
        examples = [TextExample(id="1", text="the river bank", text_b="money", label="pos", source="t:1")]
    feats = make_features(kind, examples, tok, labels=labels)
    ids = torch.tensor([feats[0].input_ids])
    types = torch.tensor([feats[0].token_type_ids])
    label = torch.tensor([feats[0].label]) if kind == "tag" else torch.tensor([1])
    model = new_task_model(directory, kind, 2, tok)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(ids, types, torch.ones_like(ids), labels=label).loss
    loss.backward()
    opt.step()
    save_task_model(model.eval(), tmp_path / "best", tok, labels)
    again = load_task_model(tmp_path / "best")
    assert families.of_model(again).name == name
    with torch.no_grad():
        assert torch.allclose(again.eval()(ids, types).logits, model(ids, types).logits, atol=1e-6)


def test_embed_probe_and_attention(model_dir):
    from muppets.analysis.attention import load_attention_model
    from muppets.transfer.embedders import load_embedder

    name, directory = model_dir
    embedder = load_embedder(directory)
    assert embedder.kind == name and embedder.pooling == "first"
    vectors = embedder.embed_batch([["the", "river", "bank"], ["money"]], [0, 2])
    assert vectors[0].shape == (2, 3, 32) and vectors[1].shape == (2, 1, 32)
    view = load_attention_model(directory).view("the river bank", "money")
    assert view.probs.shape[:2] == (2, 4) and view.is_pair and not view.causal


def test_serve_engine_embeds_and_knows_its_mlm(model_dir):
    from muppets.serve.config import ServeConfig
    from muppets.serve.engines import load_torch_engine

    name, directory = model_dir
    engine = load_torch_engine(ServeConfig(str(directory), port=0, backend="torch"))
    assert engine.kind == name and engine.has_mlm
    vectors = engine.embed_rows(engine.token_ids(["the river bank", "money"], True))
    assert len(vectors) == 2 and vectors[0].shape == (32,)


def test_export_onnx_checks_against_torch(model_dir, tmp_path):
    pytest.importorskip("onnxruntime")
    from muppets.interop.onnx_export import export_onnx

    name, directory = model_dir
    report = export_onnx(directory, tmp_path / "onnx")
    assert report.family == name and report.max_abs_diff is not None and report.max_abs_diff <= 1e-4
