"""Every command that takes ``--model``, run through ``muppets.cli.main`` on a tiny random
RoBERTa, DistilBERT and ELECTRA directory (transformers writes them): ``finetune`` one step
(classify and tag), ``probe`` one task, ``attention``, ``serve`` (one request per route:
embeddings and fill-mask on the backbone, predict on the fine-tuned directory) and
``export onnx`` of the backbone and of the task model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")

from _serve_http import post  # noqa: E402
from _tiny_families import tiny_family_dir  # noqa: E402

from muppets import families  # noqa: E402
from muppets.cli import main  # noqa: E402
from muppets.interop.model_card import read_model_card  # noqa: E402
from muppets.serve import ServeConfig, running_server  # noqa: E402

ROWS = ["the river bank was good,pos", "bad plot and awful film,neg", "a great movie,pos", "which company ?,neg"]
CONLL = "john NNP I-NP I-PER\nwent VBD I-VP O\nto TO I-PP O\nparis NNP I-NP I-LOC\n\nmary NNP I-NP I-PER\n"


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module", params=["roberta", "distilbert", "electra"])
def tuned(request, tmp_path_factory):
    """(family name, backbone directory, {kind: fine-tuned best/}) after one step of each kind."""
    root = tmp_path_factory.mktemp(request.param)
    model = tiny_family_dir(request.param, root / "model")
    (root / "train.csv").write_text("text,label\n" + "\n".join(ROWS) + "\n")
    (root / "train.conll").write_text(CONLL)
    best = {}
    for kind, train in (("classify", root / "train.csv"), ("tag", root / "train.conll")):
        args = ["finetune", str(train), "--dev", str(train), "--model", str(model), f"run_dir={root / kind}",
                "epochs=1", "batch_size=4", "max_seq_len=32", "progress=false", "device=cpu", "seed=1", "selection=last"]
        assert main(args) == 0, kind
        best[kind] = root / kind / "best"
        assert families.of_directory(best[kind]).name == request.param
    return request.param, model, best


def test_finetuned_directories_load_in_transformers_and_carry_their_card(tuned):
    _, model, best = tuned
    card = read_model_card(best["classify"])
    assert card["base_model"] == str(model) and card["pipeline_tag"] == "text-classification"
    assert card["model-index"][0]["results"][0]["metrics"][0]["name"] == "dev accuracy"  # from metrics.json
    assert read_model_card(best["tag"])["pipeline_tag"] == "token-classification"
    classify = transformers.AutoModelForSequenceClassification.from_pretrained(best["classify"])
    tag = transformers.AutoModelForTokenClassification.from_pretrained(best["tag"])
    assert classify.config.num_labels == 2 and tag.config.num_labels == 5


def test_probe_and_attention(tuned, tmp_path, capsys):
    name, model, _ = tuned
    args = ["probe", str(model), "--tasks", "sst2", "--out", str(tmp_path / "probe"), "--cache-dir",
            str(tmp_path / "cache"), "--epochs", "1", "--max-train-sentences", "16", "--max-eval-sentences", "8",
            "--no-random-baseline", "--no-control", "--no-mix", "--threads", "1"]
    assert main(args) == 0
    report = json.loads((tmp_path / "probe" / "probe.json").read_text())
    assert {r["layer"] for r in report["tasks"]["sst2"]["pretrained"]["layers"]} == {0, 1, 2}
    page = tmp_path / "page.html"
    assert main(["attention", str(model), "the river bank", "--pair", "money", "--out", str(page)]) == 0
    assert page.stat().st_size > 1000 and f"2 layers x 4 heads ({name})" in capsys.readouterr().out


def test_serve_every_route(tuned):
    name, model, best = tuned
    with running_server(ServeConfig(str(model), port=0, log_level="warning")) as url:
        status, body = post(url + "/v1/embeddings", {"input": ["the river bank", "money"]})
        assert status == 200 and len(body["data"]) == 2 and len(body["data"][0]["embedding"]) == 32
        mask = "<mask>" if name == "roberta" else "[MASK]"
        status, body = post(url + "/fill-mask", {"inputs": [f"the river {mask} was good"], "top_k": 2})
        assert status == 200, body
    with running_server(ServeConfig(str(best["classify"]), port=0, log_level="warning")) as url:
        status, body = post(url + "/predict", {"inputs": ["a great movie"], "return_probabilities": True})
        assert status == 200, body
        assert body["predictions"][0] in ("pos", "neg") and set(body["probabilities"][0]) == {"pos", "neg"}


@pytest.mark.parametrize("which", ["backbone", "classify"])
def test_export_onnx(tuned, which, tmp_path):
    _, model, best = tuned
    source = model if which == "backbone" else best["classify"]
    assert main(["export", "onnx", str(source), "--out", str(tmp_path / "onnx")]) == 0
    assert (tmp_path / "onnx" / "model.onnx").is_file()
    card = read_model_card(tmp_path / "onnx")
    assert card["base_model"] == str(source) and "onnx" in card["tags"]
    assert card["pipeline_tag"] == ("feature-extraction" if which == "backbone" else "text-classification")
