"""int8 dynamic quantization (:mod:`muppets.runtime`) on tiny random models: the linear layers
are quantized and used by the forward pass; ``Predictor(precision="int8")``, ``muppets evaluate
--precision int8``, ``muppets serve --precision int8`` (``/predict`` and embeddings) and
``muppets export onnx --quantize int8`` run it and agree; bad combinations get one clear error."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from _serve_http import post, request
from _tiny_backbones import tiny_bert, tiny_gpt

from muppets.cli import main as cli_main
from muppets.errors import ConfigError
from muppets.runtime import PRECISIONS, model_precision, set_precision
from muppets.serve import ServeConfig, running_server
from muppets.serve.config import PRECISIONS as SERVE_PRECISIONS
from muppets.serve.engines import load_engine
from muppets.transfer import Predictor
from muppets.transfer.features import FeatureOptions
from muppets.transfer.models import load_task_model, load_tokenizer, new_task_model, save_task_model
from muppets.transfer.predict import SpanOptions, save_settings

TEXTS = ["the river bank was good", "awful film !", "a great movie about john", "mary went to paris",
         "the money in the bank", "a bad plot"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("bert"))


@pytest.fixture(scope="module")
def task_dir(bert_dir, tmp_path_factory) -> Path:
    """A classify model whose muppets_finetune.json names its task: your own csv files."""
    base = tmp_path_factory.mktemp("task")
    for split, rows in (("train", TEXTS), ("dev", TEXTS)):
        lines = ["text,label"] + [f"{t},{'pos' if i % 2 else 'neg'}" for i, t in enumerate(rows)]
        (base / f"{split}.csv").write_text("\n".join(lines) + "\n")
    tok = load_tokenizer(bert_dir)
    torch.manual_seed(3)
    model = new_task_model(bert_dir, "classify", 2, tok)
    with torch.no_grad():  # logits far enough apart that int8 cannot flip a label by chance
        model.head.classifier.weight.mul_(20.0)
    out = base / "best"
    save_task_model(model, out, tok, ["neg", "pos"])
    files = {"train": str(base / "train.csv"), "dev": str(base / "dev.csv")}
    save_settings(out, FeatureOptions(max_seq_len=32), SpanOptions(), {"task": "", "finetune": {"task": {"files": files}}})
    return out


def test_int8_quantizes_every_linear_and_the_forward_uses_them(task_dir):
    from torch.ao.nn.quantized.dynamic import Linear as QLinear

    ref, model = load_task_model(task_dir).eval(), load_task_model(task_dir).eval()
    set_precision(model, "int8")
    assert model_precision(model) == "int8" and model_precision(ref) == "float32"
    assert not [m for m in model.modules() if type(m) is nn.Linear]
    attn = next(m for m in model.modules() if hasattr(m, "qkv"))
    quantized = [attn.qkv, attn.out] + [m for m in model.modules() if isinstance(m, QLinear)]
    assert isinstance(attn.qkv, QLinear) and isinstance(attn.out, QLinear) and len(quantized) > 4
    calls = []
    hooks = [m.register_forward_hook(lambda *_: calls.append(1)) for m in model.modules() if isinstance(m, QLinear)]
    ids = torch.randint(5, 100, (3, 11))
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0
    with torch.no_grad():
        want = ref(ids, torch.zeros_like(ids), mask).logits
        got = model(ids, torch.zeros_like(ids), mask).logits
    for h in hooks:
        h.remove()
    assert len(calls) == len(hooks)  # qkv, out, the feed-forward pair of each layer, pooler, classifier
    for m in model.modules():  # 7-bit weights, one scale per output row (muppets.runtime's docstring)
        if isinstance(m, QLinear):
            w = m.weight()
            assert w.q_per_channel_scales().numel() == w.shape[0] and not w.q_per_channel_zero_points().any()
            assert int(w.int_repr().abs().max()) <= 64
    assert not torch.equal(got, want)  # it really ran in int8 …
    assert torch.allclose(got, want, atol=0.05 * float(want.abs().max()))  # … and stays close
    assert PRECISIONS == SERVE_PRECISIONS  # the server's list (no torch import there) is the runtime's


def test_int8_rows_are_quantized_per_token_so_batching_cannot_change_them():
    """A token's output is a function of its own input row: bit-identical alone, in any batch and
    beside rows of any range; a hand-computed per-row int8 reference agrees; and it is closer to
    float32 than one scale for the whole call when a row has a much larger range than the others."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 8)).eval()
    ref = model[0]
    w, b = ref.weight.detach().clone(), ref.bias.detach().clone()
    set_precision(model, "int8")
    layer = model[0]
    x = torch.randn(5, 16)
    x[1] *= 0.01  # a quiet row …
    loud = torch.randn(3, 16) * 100.0  # … and loud neighbours
    with torch.no_grad():
        alone = torch.cat([layer(x[i: i + 1]) for i in range(5)])
        batched = layer(x)
        mixed = layer(torch.cat([loud[:2], x, loud[2:]]))[2:7]
        padded = layer(torch.cat([x, torch.zeros(4, 16)]).view(3, 3, 16)).view(9, 8)[:5]
    assert torch.equal(alone, batched) and torch.equal(alone, mixed) and torch.equal(alone, padded)
    # hand reference: the layer's int8 weights, each input row on its own 8-bit grid over [-1, 1]
    wq = layer.weight().dequantize()
    assert (wq - w).abs().max() < w.abs().max() / 63
    s = x.abs().amax(1, keepdim=True)
    step = 2.0 / 255.0
    xq = (torch.clamp(torch.round(x / s / step) + 128, 0, 255) - 128) * step * s
    want = xq @ wq.T + b
    assert torch.allclose(batched, want, atol=1e-4 * float(want.abs().max()) + 1e-5)
    exact = ref(x)
    per_call = torch.ops.quantized.linear_dynamic(torch.cat([loud[:2], x]), layer._packed_params._packed_params,
                                                  reduce_range=False)[2:]
    assert (batched[1] - exact[1]).abs().max() * 10 < (per_call[1] - exact[1]).abs().max()


def test_predictor_int8_and_bf16_are_close_to_float32_and_evaluate_reports_the_change(task_dir, capsys):
    base = Predictor(task_dir).predict_proba(TEXTS)
    for precision in ("int8", "bf16"):
        p = Predictor(task_dir, precision=precision)
        probs = p.predict_proba(TEXTS)
        assert p.precision == precision and model_precision(p.model) == precision
        assert np.abs(probs - base).max() < 0.05
        assert p.predict(TEXTS) == Predictor(task_dir).predict(TEXTS)
    with pytest.raises(ConfigError, match="int4"):
        Predictor(task_dir, precision="int4")
    train, dev = task_dir.parent / "train.csv", task_dir.parent / "dev.csv"
    args = ["evaluate", str(train), "--dev", str(dev), "--model", str(task_dir), "--precision", "int8"]
    assert cli_main(args) == 0
    out = capsys.readouterr().out
    assert "float32:" in out and "int8:" in out and "int8 - float32: accuracy +0.0000" in out


def test_served_int8_predict_equals_offline_int8_and_embeddings_run_int8(task_dir, bert_dir):
    offline = Predictor(task_dir, precision="int8")(TEXTS, all_scores=True)
    cfg = ServeConfig(model_dir=str(task_dir), port=0, precision="int8", backend="torch", max_wait_ms=1, log_level="warning")
    with running_server(cfg) as url:
        status, body = post(url + "/predict", {"inputs": TEXTS, "return_probabilities": True})
        health = request(url + "/health")[2]
    assert status == 200, body
    assert health["precision"] == "int8"
    assert body["predictions"] == [o["label"] for o in offline]  # one request = the offline batch: equal
    assert body["scores"] == [o["score"] for o in offline]
    assert body["probabilities"] == [o["scores"] for o in offline]
    with running_server(cfg) as url:  # one sentence a request: other batches than offline, the same answers
        single = [post(url + "/predict", {"inputs": [t], "return_probabilities": True})[1] for t in TEXTS]
    assert [b["predictions"][0] for b in single] == body["predictions"]
    assert max(abs(b["scores"][0] - s) for b, s in zip(single, body["scores"])) < 1e-3
    encoder = load_engine(ServeConfig(model_dir=str(bert_dir), precision="int8", backend="torch"))
    assert encoder.describe()["precision"] == "int8" and model_precision(encoder.backbone) == "int8"
    vectors = np.stack(encoder.embed_rows([[2, 10, 11, 12, 3], [2, 13, 3]]))
    float32 = np.stack(load_engine(ServeConfig(model_dir=str(bert_dir), backend="torch")).embed_rows(
        [[2, 10, 11, 12, 3], [2, 13, 3]]))
    cos = (vectors * float32).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(float32, axis=1)
    assert not np.array_equal(vectors, float32) and cos.min() > 0.99
    from muppets.sentence.encode import SentenceModel  # encode() runs the same switch

    int8_model = SentenceModel(bert_dir, precision="int8")
    assert model_precision(int8_model.model.backbone) == "int8"
    a, b = int8_model.encode(TEXTS), SentenceModel(bert_dir).encode(TEXTS)
    assert not np.array_equal(a, b) and ((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min() > 0.99


def _export_main(argv: list[str]) -> int:
    from muppets.interop.export_cli import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["export", *argv])
    return args.func(args)


def test_onnx_int8_export_is_scored_loads_predicts_and_serves(task_dir, tmp_path, capsys):
    pytest.importorskip("onnxruntime", reason="ONNX tests need the 'onnx' extra (pip install -e \".[onnx]\")")
    import onnx

    from muppets.interop.onnx_export import read_manifest
    from muppets.interop.onnx_runtime import OnnxPredictor

    out = tmp_path / "int8"
    assert _export_main(["onnx", str(task_dir), "--out", str(out), "--quantize", "int8", "--max-eval-examples", "4"]) == 0
    printed = capsys.readouterr().out
    assert "int8 - float32: accuracy" in printed and "4 of 6 examples" in printed
    manifest = read_manifest(out)
    assert manifest["precision"] == "int8" and manifest["max_abs_diff"] <= 1e-4 < manifest["int8_max_abs_diff"] < 0.5
    accuracy = manifest["accuracy"]
    assert set(accuracy["scores"]) == {"float32", "int8"} and accuracy["examples"] == 4
    assert accuracy["change"]["int8"]["accuracy"] == pytest.approx(
        accuracy["scores"]["int8"]["accuracy"] - accuracy["scores"]["float32"]["accuracy"])
    ops = {n.op_type for n in onnx.load(str(out / "model.onnx")).graph.node}
    assert "MatMulInteger" in ops and not (out / "model-float32.onnx").exists()
    onnx_predictor = OnnxPredictor(out, threads=1)
    assert onnx_predictor.precision == "int8"
    assert onnx_predictor.predict(TEXTS) == Predictor(task_dir).predict(TEXTS)  # labels kept (logits far apart)
    assert np.abs(onnx_predictor.predict_proba(TEXTS) - Predictor(task_dir).predict_proba(TEXTS)).max() < 0.05
    engine = load_engine(ServeConfig(model_dir=str(out), threads=1))  # the export alone: served at its precision
    assert engine.describe()["backend"] == "onnx" and engine.describe()["precision"] == "int8"
    # without a task (or with --no-score) nothing is scored
    assert _export_main(["onnx", str(task_dir), "--out", str(tmp_path / "n"), "--quantize", "int8", "--no-score"]) == 0
    assert "not scored" in capsys.readouterr().out and read_manifest(tmp_path / "n").get("accuracy") is None


def test_bad_precision_combinations_get_one_clear_error(task_dir, tmp_path):
    gpt = tiny_gpt(tmp_path / "gpt")
    with pytest.raises(ConfigError, match="encoders and fine-tuned task models run in it.*gpt model"):
        load_engine(ServeConfig(model_dir=str(gpt), precision="int8", backend="torch"))
    with pytest.raises(ConfigError, match="bf16 runs in torch"):
        ServeConfig(model_dir=str(task_dir), precision="bf16", backend="onnx")
    with pytest.raises(ConfigError, match="not one of"):
        ServeConfig(model_dir=str(task_dir), precision="int4")
    pytest.importorskip("onnxruntime", reason="ONNX tests need the 'onnx' extra (pip install -e \".[onnx]\")")
    from muppets.interop.onnx_export import export_onnx

    export_onnx(task_dir, tmp_path / "f32")  # a float32 export: --precision int8 on it is refused by name
    with pytest.raises(ConfigError, match="is float32; export it with --quantize int8"):
        load_engine(ServeConfig(model_dir=str(tmp_path / "f32"), precision="int8", backend="onnx"))
    assert json.loads((tmp_path / "f32" / "muppets_onnx.json").read_text())["precision"] == "float32"


def test_int8_speed_benchmark_smoke_measures_and_scores_every_runtime(tmp_path):
    pytest.importorskip("onnxruntime", reason="ONNX tests need the 'onnx' extra (pip install -e \".[onnx]\")")
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "int8_speed.py"
    spec = importlib.util.spec_from_file_location("int8_speed", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "r.json"
    assert bench.main(["--smoke", "--batch-sizes", "1", "4", "--out", str(out)]) == 0
    result = json.loads(out.read_text())["results"][0]
    assert set(result["speed"]) == set(bench.RUNTIMES) == set(result["accuracy"]["scores"])
    for runtime, sizes in result["speed"].items():
        assert set(sizes) == {"1", "4"} and all(len(row["per_s"]) == 2 and row["per_s_min"] > 0 for row in sizes.values())
        assert sizes["4"]["vs_torch-float32"] == pytest.approx(sizes["4"]["per_s_median"]
                                                               / result["speed"]["torch-float32"]["4"]["per_s_median"])
    assert result["scored_examples"] == result["split_size"] > 0


def test_auto_backend_compares_int8_with_int8_and_keeps_float32_off_an_int8_export(task_dir, tmp_path):
    pytest.importorskip("onnxruntime", reason="ONNX tests need the 'onnx' extra (pip install -e \".[onnx]\")")
    import shutil

    from muppets.interop.onnx_export import export_onnx

    model = tmp_path / "model"
    shutil.copytree(task_dir, model)
    export_onnx(model, model / "onnx", quantize="int8")  # no scoring: export_onnx alone never scores
    both = load_engine(ServeConfig(model_dir=str(model), precision="int8", threads=1))  # auto: measured
    assert both.precision == "int8" and set(both.backend_ms) == {"torch", "onnx"}
    plain = load_engine(ServeConfig(model_dir=str(model), threads=1))  # float32 is not measured against int8
    assert (plain.backend, plain.precision, plain.backend_ms) == ("torch", "float32", None)
