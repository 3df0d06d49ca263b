"""``muppets serve`` end to end on tiny random models: a real uvicorn server on a free loopback
port, every route, served == offline outputs, every bad-input case, back-pressure, API key,
metrics, graceful shutdown."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from _serve_http import post, request, stream  # noqa: E402
from _tiny_backbones import tiny_bert, tiny_gpt  # noqa: E402

from muppets.errors import ConfigError  # noqa: E402
from muppets.generate import GenerationConfig, generate_text  # noqa: E402
from muppets.interop.hf_bert import load_hf_bert  # noqa: E402
from muppets.interop.hf_gpt import load_hf_gpt  # noqa: E402
from muppets.serve import ServeConfig, running_server  # noqa: E402
from muppets.serve.batcher import Work  # noqa: E402
from muppets.serve.engines import EMBED, Engine, load_engine  # noqa: E402
from muppets.tokenizers import ByteLevelBPETokenizer, WordPieceTokenizer  # noqa: E402
from muppets.transfer import Predictor  # noqa: E402
from muppets.transfer.models import load_tokenizer, new_task_model, save_task_model  # noqa: E402

SENTENCES = ["the river bank was good", "a great movie", "john went to paris and london",
             "bad plot , awful film !", "which company ?", "money"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def cfg(model_dir, **kw) -> ServeConfig:
    return ServeConfig(str(model_dir), port=0, log_level="warning", **kw)


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("bert"))


@pytest.fixture(scope="module")
def gpt_dir(tmp_path_factory) -> Path:
    return tiny_gpt(tmp_path_factory.mktemp("gpt"))


@pytest.fixture(scope="module")
def bert_url(bert_dir):
    with running_server(cfg(bert_dir, max_wait_ms=20, max_inputs=8, max_chars=400, max_body_bytes=20_000)) as url:
        yield url


@pytest.fixture(scope="module")
def gpt_url(gpt_dir):
    with running_server(cfg(gpt_dir, max_wait_ms=20, max_new_tokens=24)) as url:
        yield url


# ----------------------------------------------------------------------------- embeddings


def offline_mean_embeddings(model_dir: Path, texts: list[str]) -> np.ndarray:
    """sentence-transformers' mean pooling, computed here without the server's code."""
    model, tok = load_hf_bert(model_dir).eval(), WordPieceTokenizer.load(model_dir)
    out = []
    for text in texts:
        ids = torch.tensor([[tok.cls_id, *tok.encode(text), tok.sep_id]])
        with torch.no_grad():
            h = model.backbone(ids, torch.zeros_like(ids), torch.ones_like(ids)).layers[-1]
        out.append(h[0].mean(0).numpy())
    return np.stack(out)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def test_embeddings_equal_offline_and_are_openai_shaped(bert_url, bert_dir):
    status, body = post(bert_url + "/v1/embeddings", {"input": SENTENCES, "model": bert_dir.name})
    assert status == 200 and body["object"] == "list" and body["model"] == bert_dir.name
    assert [d["index"] for d in body["data"]] == list(range(len(SENTENCES)))
    served = np.array([d["embedding"] for d in body["data"]])
    assert served.shape == (len(SENTENCES), 32)
    assert cosines(served, offline_mean_embeddings(bert_dir, SENTENCES)).min() >= 0.9999
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > len(SENTENCES)
    status, one = post(bert_url + "/v1/embeddings", {"input": SENTENCES[0], "encoding_format": "base64"})
    import base64

    vec = np.frombuffer(base64.b64decode(one["data"][0]["embedding"]), "<f4")
    assert status == 200 and cosines(vec, served[0]) >= 0.9999


def test_concurrent_requests_are_batched_and_equal_alone(bert_dir):
    texts = SENTENCES * 4
    with running_server(cfg(bert_dir, max_wait_ms=200, max_batch_size=64)) as url:
        results: dict[int, np.ndarray] = {}

        def one(i):
            results[i] = np.array(post(url + "/v1/embeddings", {"input": texts[i]})[1]["data"][0]["embedding"])

        # a large request first keeps the one worker busy, so the small ones queue behind it
        # and share batches even on a loaded machine, where they would otherwise arrive one by one
        blocker = threading.Thread(target=post, args=(url + "/v1/embeddings", {"input": [" ".join(texts[:6])] * 64}))
        blocker.start()
        time.sleep(0.05)
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
        [t.start() for t in threads]
        [t.join() for t in threads + [blocker]]
        metrics = request(url + "/metrics")[2]
    served = np.stack([results[i] for i in range(len(texts))])
    assert cosines(served, offline_mean_embeddings(bert_dir, texts)).min() >= 0.9999
    batches = float(re.search(r"^muppets_batch_size_count (\S+)$", metrics, re.M).group(1))
    assert batches < len(texts) + 1  # some requests shared a forward pass (the blocker counts one)


def test_truncate_cuts_long_inputs_else_413(bert_dir):
    long_text = " ".join(["money"] * 100)  # > 64 positions
    with running_server(cfg(bert_dir)) as url:
        status, body = post(url + "/v1/embeddings", {"input": long_text})
        assert status == 413 and "at most 64" in body["error"]["message"]
        status, body = post(url + "/v1/embeddings", {"input": long_text, "truncate": True})
        assert status == 200 and body["usage"]["prompt_tokens"] == 64


# ----------------------------------------------------------------------------- fill-mask


def test_fill_mask_equals_offline_mlm(bert_url, bert_dir):
    texts = ["the river [MASK] was good", "a [MASK] movie and a [MASK] plot"]
    status, body = post(bert_url + "/fill-mask", {"inputs": texts, "top_k": 3})
    assert status == 200 and [len(r) for r in body["results"]] == [1, 2]
    model, tok = load_hf_bert(bert_dir).eval(), WordPieceTokenizer.load(bert_dir)
    for text, per_mask in zip(texts, body["results"]):
        ids = torch.tensor([[tok.cls_id, *tok.encode(text), tok.sep_id]])
        with torch.no_grad():
            logits = model(ids, torch.zeros_like(ids), torch.ones_like(ids)).mlm_logits[0]  # (T, V)
        probs = logits[ids[0] == tok.mask_id].softmax(-1)
        for m, cands in enumerate(per_mask):
            top = probs[m].topk(3)
            assert [c["token"] for c in cands] == top.indices.tolist()
            assert np.allclose([c["score"] for c in cands], top.values.numpy(), atol=1e-5)
            assert "[MASK]" not in cands[0]["sequence"] or len(per_mask) > 1


# ----------------------------------------------------------------------------- completions


def test_greedy_completions_equal_offline_generate_also_when_batched(gpt_url, gpt_dir):
    model, tok = load_hf_gpt(gpt_dir).eval(), ByteLevelBPETokenizer.load(gpt_dir)
    prompts = ["the river", "john went to", "a great movie and the", "money"]
    offline = [generate_text(model, tok, [p], GenerationConfig(max_new_tokens=12, stop_at_eos=True))[0]
               for p in prompts]
    answers: dict[int, dict] = {}

    def one(i):
        answers[i] = post(gpt_url + "/v1/completions", {"prompt": prompts[i], "max_tokens": 12, "temperature": 0})[1]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert [answers[i]["choices"][0]["text"] for i in range(len(prompts))] == offline
    status, together = post(gpt_url + "/v1/completions", {"prompt": prompts, "max_tokens": 12, "temperature": 0})
    assert status == 200 and [c["text"] for c in together["choices"]] == offline
    assert together["object"] == "text_completion" and together["usage"]["completion_tokens"] > 0
    assert {c["finish_reason"] for c in together["choices"]} <= {"length", "stop"}


def test_streamed_completion_is_sse_and_equals_the_plain_one(gpt_url):
    body = {"prompt": "the bank", "max_tokens": 10, "temperature": 0}
    plain = post(gpt_url + "/v1/completions", body)[1]["choices"][0]
    events = stream(gpt_url + "/v1/completions", {**body, "stream": True,
                                                   "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if e["choices"]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == plain["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == plain["finish_reason"]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert events[-2]["usage"]["completion_tokens"] >= 1


def test_stop_strings_seeded_sampling_n_and_echo(gpt_url):
    body = {"prompt": "the river", "max_tokens": 16, "temperature": 0}
    full = post(gpt_url + "/v1/completions", body)[1]["choices"][0]["text"]
    if len(full) > 3:
        stop = full[2:4]
        cut = post(gpt_url + "/v1/completions", {**body, "stop": stop})[1]["choices"][0]
        assert cut["text"] == full[: full.find(stop)] and cut["finish_reason"] == "stop"
    sampled = {"prompt": "the", "max_tokens": 8, "temperature": 0.9, "top_p": 0.9, "seed": 7, "n": 2}
    a, b = (post(gpt_url + "/v1/completions", sampled)[1] for _ in range(2))
    assert [c["text"] for c in a["choices"]] == [c["text"] for c in b["choices"]]
    assert [c["index"] for c in a["choices"]] == [0, 1]
    echo = post(gpt_url + "/v1/completions", {**body, "echo": True})[1]["choices"][0]["text"]
    assert echo == "the river" + full


# ----------------------------------------------------------------------------- predict


INPUTS = {"classify": ["a great movie", "awful plot"],
          "pair": [["a great movie", "a good film"], {"text": "money", "text_pair": "cash"}],
          "regress": ["a great movie", ["money", "cash"]],
          "tag": [["john", "went", "to", "paris"], "mary went to london"],
          "span": [["who went to paris ?", "john went to paris ."],
                   {"question": "what ?", "context": "the river bank was good"}],
          "choice": [["the bank", ["river", "money"]], {"context": "a movie", "endings": ["good", "bad"]}]}
LABELS = {"classify": ["neg", "pos"], "pair": ["no", "yes"], "tag": ["O", "B-PER", "B-LOC"]}


def as_python(kind, x):
    """The JSON input as Predictor.predict takes it."""
    if isinstance(x, dict):
        x = tuple(x.values())
    if kind == "tag" and isinstance(x, str):
        return x  # raw text: entity groups
    return tuple(x) if isinstance(x, list) and kind != "tag" else x


@pytest.mark.parametrize("kind,family", [(k, "bert") for k in sorted(INPUTS)] + [("classify", "gpt"), ("choice", "gpt")])
def test_predict_equals_predictor_for_every_kind(kind, family, bert_dir, gpt_dir, tmp_path):
    base = bert_dir if family == "bert" else gpt_dir
    tok = load_tokenizer(base)
    torch.manual_seed(1)
    labels = LABELS.get(kind, [])
    model = new_task_model(base, kind, len(labels) or None, tok)
    save_task_model(model, tmp_path, tok, labels)
    expected = Predictor(tmp_path).predict([as_python(kind, x) for x in INPUTS[kind]])
    with running_server(cfg(tmp_path, max_wait_ms=1)) as url:
        status, body = post(url + "/predict", {"inputs": INPUTS[kind], "return_probabilities": True})
        health = request(url + "/health")[2]
        wrong = post(url + "/predict", {"inputs": [{"nonsense": 1}]})
    assert status == 200, body
    assert health["routes"] == ["/predict"] and health["task"] == kind
    if kind == "classify" and family == "bert":  # embedding settings a task model would ignore are refused
        with pytest.raises(ConfigError, match="fine-tuned task model"):
            load_engine(cfg(tmp_path, pooling="cls"))
    got = body["predictions"]
    if kind == "regress":
        assert np.allclose(got, expected, atol=1e-5)
    elif kind == "span":
        assert [(g["answer"], g["start"], g["end"]) for g in got] == [(e["answer"], e["start"], e["end"])
                                                                       for e in expected]
        contexts = [as_python(kind, x)[1] for x in INPUTS[kind]]
        assert [g["answer"] for g in got] == [c[g["start"]:g["end"]] for c, g in zip(contexts, got)]
    else:
        assert got == expected
    if kind == "tag":
        assert isinstance(got[1], list) and all(set(g) == {"entity_group", "score", "word", "start", "end"}
                                                for g in got[1])
    if kind in ("classify", "pair", "choice"):
        assert len(body["scores"]) == len(got) and all(0 < s <= 1 for s in body["scores"])
    if kind in ("classify", "pair"):
        assert all(abs(sum(p.values()) - 1) < 1e-6 and set(p) == set(labels) for p in body["probabilities"])
    assert wrong[0] == 422 and f"a {kind} model takes" in wrong[1]["error"]["message"]


# ----------------------------------------------------------------------------- bad input


BAD = [  # (route, raw body or JSON, status, words in the message)
    ("/v1/embeddings", b"{not json", 400, "not valid JSON"),
    ("/v1/embeddings", b"", 400, "empty"),
    ("/v1/embeddings", [1, 2], 422, "JSON object"),
    ("/v1/embeddings", {}, 422, "input is required"),
    ("/v1/embeddings", {"input": []}, 422, "non-empty list"),
    ("/v1/embeddings", {"input": ""}, 422, "empty"),
    ("/v1/embeddings", {"input": ["ok", "  "]}, 422, "input[1] is empty"),
    ("/v1/embeddings", {"input": 42}, 422, "string"),
    ("/v1/embeddings", {"input": ["ok", 3]}, 422, "token-id inputs"),
    ("/v1/embeddings", {"input": ["a"] * 9}, 413, "at most 8"),
    ("/v1/embeddings", {"input": "a" * 401}, 413, "at most 400"),
    ("/v1/embeddings", {"input": "ok", "model": "gpt-4"}, 404, "not served here"),
    ("/v1/embeddings", {"input": "ok", "model": 3}, 422, "model must be a string"),
    ("/v1/embeddings", {"input": "ok", "inptu": 1}, 422, "unknown field"),
    ("/v1/embeddings", {"input": "ok", "encoding_format": "int8"}, 422, "encoding_format"),
    ("/v1/embeddings", {"input": "ok", "dimensions": 8}, 422, "dimensions"),
    ("/v1/embeddings", {"input": "ok", "truncate": "yes"}, 422, "true or false"),
    ("/v1/embeddings", b'{"input": "ok", "pad": "' + b"x" * 25_000 + b'"}', 413, "bytes"),
    ("/fill-mask", {"inputs": "no mask here"}, 422, "no [MASK]"),
    ("/fill-mask", {"inputs": "a [MASK]", "top_k": 0}, 422, "top_k"),
    ("/fill-mask", {"inputs": "a [MASK]", "top_k": True}, 422, "top_k"),
    ("/v1/completions", {"prompt": "hi"}, 404, "answers /v1/embeddings, /fill-mask"),
    ("/predict", {"inputs": ["hi"]}, 404, "/predict is not served"),
    ("/nowhere", {}, 404, "no route /nowhere"),
]


@pytest.mark.parametrize("route,body,status,words", BAD, ids=[f"{r}-{s}-{w}" for r, _, s, w in BAD])
def test_bad_input_gets_a_clear_4xx_and_the_server_keeps_serving(bert_url, route, body, status, words):
    raw = body if isinstance(body, bytes) else None
    got, data = post(bert_url + route, None if raw is not None else body, raw=raw)
    assert got == status, data
    assert words in data["error"]["message"], data
    assert data["error"]["type"]
    assert post(bert_url + "/v1/embeddings", {"input": "still serving"})[0] == 200


BAD_COMPLETIONS = [
    ({"prompt": "hi", "max_tokens": 25}, 413, "at most 24"),
    ({"prompt": "hi", "max_tokens": 0}, 422, "max_tokens"),
    ({"prompt": "hi", "max_tokens": "3"}, 422, "integer"),
    ({"prompt": "hi", "temperature": 3}, 422, "temperature"),
    ({"prompt": "hi", "top_p": 0}, 422, "top_p"),
    ({"prompt": "hi", "logprobs": 3}, 422, "logprobs is not supported"),
    ({"prompt": "hi", "presence_penalty": 0.5}, 422, "repetition_penalty is"),
    ({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, 422, "stop"),
    ({"prompt": "hi", "stream": "yes"}, 422, "true or false"),
    ({"prompt": [[1, 2], [10 ** 9]]}, 422, "token ids"),
    ({"prompt": " ".join(["money"] * 60), "max_tokens": 20}, 400, "context is 64 tokens"),
    ({"prompt": "hi", "model": "davinci"}, 404, "not served here"),
    ({"input": "hi"}, 422, "unknown field"),
]


@pytest.mark.parametrize("body,status,words", BAD_COMPLETIONS, ids=[w for _, _, w in BAD_COMPLETIONS])
def test_bad_completions(gpt_url, body, status, words):
    got, data = post(gpt_url + "/v1/completions", body)
    assert got == status and words in data["error"]["message"], data


def test_token_id_prompts_and_empty_prompt(gpt_url, gpt_dir):
    tok = ByteLevelBPETokenizer.load(gpt_dir)
    as_text = post(gpt_url + "/v1/completions", {"prompt": "the river", "max_tokens": 5, "temperature": 0})[1]
    as_ids = post(gpt_url + "/v1/completions", {"prompt": tok.encode("the river"), "max_tokens": 5,
                                                "temperature": 0})[1]
    assert as_ids["choices"][0]["text"] == as_text["choices"][0]["text"]
    assert post(gpt_url + "/v1/completions", {"prompt": "", "max_tokens": 3, "temperature": 0})[0] == 200


def test_wrong_method_and_models_list(bert_url, bert_dir):
    status, head, body = request(bert_url + "/v1/embeddings", "GET")
    assert status == 405 and "POST" in head.get("allow", "") and "not allowed" in body["error"]["message"]
    status, _, body = request(bert_url + "/v1/models")
    assert status == 200 and body["data"][0]["id"] == bert_dir.name


def test_a_port_in_use_is_refused_before_the_model_loads():
    import socket

    from muppets.serve.app import check_address

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"--port {port}: cannot listen on 127\.0\.0\.1"):
            check_address("127.0.0.1", port)
    check_address("127.0.0.1", 0)
    check_address("", 0)  # every interface, as uvicorn takes it


def test_a_runs_best_or_final_directory_serves_under_the_runs_name(tmp_path):
    from muppets.serve.app import default_model_name

    assert default_model_name(str(tmp_path / "mt" / "tasks" / "rte" / "best")) == "rte"
    assert default_model_name(str(tmp_path / "bert-mini" / "final") + "/") == "bert-mini"
    assert default_model_name(str(tmp_path / "my-model")) == "my-model"
    assert default_model_name("minilm") == "minilm"
    (tmp_path / "runs" / "x" / "final").mkdir(parents=True)
    (tmp_path / "current").symlink_to(tmp_path / "runs" / "x" / "final")
    assert default_model_name(str(tmp_path / "current")) == "current"  # the link's name, which clients were told


# ----------------------------------------------------------------------------- operations


class SlowEngine(Engine):
    """Embeddings that take ``delay`` seconds per batch (back-pressure and shutdown tests)."""

    kind, routes, dim = "slow", (EMBED,), 2

    def __init__(self, delay: float, gate: threading.Event | None = None) -> None:
        super().__init__(Path("slow"))
        self.delay, self.seen, self.gate = delay, [], gate

    def embedding_items(self, texts, truncate):
        return [Work((EMBED,), len(t), t) for t in texts]

    def run(self, key, items):
        self.seen.extend(w.payload for w in items)
        time.sleep(self.delay)
        if self.gate is not None:
            assert self.gate.wait(10), "the test never opened the gate"
        return [np.array([len(w.payload), 1.0], np.float32) for w in items]


def until(condition, timeout: float = 10.0) -> None:
    """Poll ``condition`` until it holds (fails the test after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def test_full_queue_answers_503_with_retry_after_and_recovers():
    statuses: list[tuple[int, dict]] = []
    lock = threading.Lock()
    with running_server(ServeConfig("slow", port=0, log_level="warning", max_batch_size=1, queue_size=2,
                                    max_inputs=1),
                        engine=SlowEngine(0.3)) as url:

        def one():
            status, head, _ = request(url + "/v1/embeddings", "POST", {"input": "abc"})
            with lock:
                statuses.append((status, head))

        threads = [threading.Thread(target=one) for _ in range(8)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        codes = sorted(s for s, _ in statuses)
        assert len(codes) == 8 and set(codes) == {200, 503}  # every request answered: a result or a 503
        assert all(int(h["retry-after"]) >= 1 for s, h in statuses if s == 503)
        assert post(url + "/v1/embeddings", {"input": "later"})[0] == 200  # recovered
        metrics = request(url + "/metrics")[2]
    assert 'muppets_requests_total{route="/v1/embeddings",status="503"}' in metrics


def test_graceful_shutdown_finishes_requests_in_flight():
    answers = []
    engine = SlowEngine(0.5)
    with running_server(ServeConfig("slow", port=0, log_level="warning"), engine=engine) as url:
        t = threading.Thread(target=lambda: answers.append(post(url + "/v1/embeddings", {"input": "abc"})))
        t.start()
        until(lambda: engine.seen == ["abc"])  # the request is in the model when the shutdown starts
    t.join()
    assert answers and answers[0][0] == 200 and answers[0][1]["data"][0]["embedding"] == [3.0, 1.0]


def test_a_client_that_hangs_up_costs_no_compute():
    import socket

    gate = threading.Event()  # holds "busy" in the model until the hang-up has been answered
    engine = SlowEngine(0.0, gate)
    with running_server(ServeConfig("slow", port=0, log_level="warning", max_batch_size=1), engine=engine) as url:
        first = threading.Thread(target=lambda: post(url + "/v1/embeddings", {"input": "busy"}))
        first.start()
        until(lambda: engine.seen == ["busy"])  # "busy" is in the model
        port = int(url.rsplit(":", 1)[1])
        body = b'{"input": "abandoned"}'
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            until(lambda: "muppets_queue_depth 1" in request(url + "/metrics")[2])  # queued behind "busy"
        until(lambda: 'status="499"' in request(url + "/metrics")[2])  # the hang-up was noticed
        gate.set()
        first.join()
        assert post(url + "/v1/embeddings", {"input": "after"})[0] == 200
        metrics = request(url + "/metrics")[2]
    assert engine.seen == ["busy", "after"]
    assert 'status="499"' in metrics and "process_resident_memory_bytes" in metrics


def test_api_key(bert_dir):
    with running_server(cfg(bert_dir, api_key="s3cret")) as url:
        body = {"input": "hello"}
        assert request(url + "/health")[0] == 200  # health checks need no key
        status, head, data = request(url + "/v1/embeddings", "POST", body)
        assert status == 401 and head["www-authenticate"] == "Bearer" and "API key" in data["error"]["message"]
        assert post(url + "/v1/embeddings", body, headers={"Authorization": "Bearer wrong"})[0] == 401
        assert post(url + "/v1/embeddings", body, headers={"Authorization": "Bearer s3cret"})[0] == 200
        assert request(url + "/metrics")[0] == 401


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$')


def parse_metrics(text: str) -> dict[str, list[tuple[str, float]]]:
    """Prometheus text format 0.0.4: every sample line parses, every family has HELP and TYPE."""
    families, out = {}, {}
    for line in text.strip().splitlines():
        if line.startswith("# "):
            kind, name = line.split()[1:3]
            families.setdefault(name, set()).add(kind)
            continue
        m = SAMPLE.match(line)
        assert m, f"unparsable metrics line: {line!r}"
        out.setdefault(m.group(1), []).append((m.group(2) or "", float(m.group(3))))
    assert all(kinds == {"HELP", "TYPE"} for kinds in families.values())
    return out


def test_metrics_parse_and_count(bert_url):
    post(bert_url + "/v1/embeddings", {"input": ["one", "two"]})
    post(bert_url + "/v1/embeddings", {"input": []})
    status, head, text = request(bert_url + "/metrics")
    assert status == 200 and head["content-type"].startswith("text/plain; version=0.0.4")
    samples = parse_metrics(text)
    requests = dict(samples["muppets_requests_total"])
    assert requests['{route="/v1/embeddings",status="200"}'] >= 1
    assert requests['{route="/v1/embeddings",status="422"}'] >= 1
    buckets = [v for labels, v in samples["muppets_request_duration_seconds_bucket"]
               if 'route="/v1/embeddings"' in labels]
    assert buckets == sorted(buckets) and buckets[-1] >= 2
    assert samples["muppets_batch_size_count"][0][1] >= 1
    assert samples["muppets_queue_depth"][0][1] == 0
    assert "muppets_requests_in_flight" in samples


def test_cli_entry_parses_every_option():
    import argparse

    from muppets.serve.cli import add_parser, config_from_args

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", "runs/x", "--port", "9000", "--max-batch-tokens", "4096", "--max-wait-ms",
                              "2.5", "--queue-size", "10", "--max-inputs", "10", "--threads", "2", "--api-key", "k",
                              "--max-batch-size", "1", "--pooling", "cls", "--no-normalize", "--precision", "bf16",
                              "--backend", "torch"])
    c = config_from_args(args)
    assert (c.model_dir, c.port, c.max_batch_tokens, c.max_wait_ms, c.queue_size, c.threads, c.api_key) == \
        ("runs/x", 9000, 4096, 2.5, 10, 2, "k")
    assert c.max_batch_size == 1 and c.pooling == "cls" and c.normalize is False and c.host == "127.0.0.1"
    assert c.max_inputs == 10
    assert (c.precision, c.backend) == ("bf16", "torch")


# ----------------------------------------------------------------------------- other model kinds


@pytest.mark.parametrize("kind", ["vectors", "elmo", "gpt"])
def test_embeddings_of_word_models_and_gpt_equal_offline(kind, gpt_dir, tmp_path):
    from _tiny_backbones import tiny_elmo, tiny_vectors

    from muppets.transfer.embed import embed

    texts = ["the river bank", "john went to paris", "money"]
    source = {"vectors": lambda: tiny_vectors(tmp_path / "v.txt"), "elmo": lambda: tiny_elmo(tmp_path / "elmo"),
              "gpt": lambda: gpt_dir}[kind]()
    with running_server(cfg(source)) as url:
        status, body = post(url + "/v1/embeddings", {"input": texts})
        assert post(url + "/v1/completions", {"prompt": "x"})[0] == (200 if kind == "gpt" else 404)
    assert status == 200, body
    served = np.array([d["embedding"] for d in body["data"]])
    if kind == "gpt":  # mean over the prompt's tokens of the top layer
        model, tok = load_hf_gpt(gpt_dir).eval(), ByteLevelBPETokenizer.load(gpt_dir)
        with torch.no_grad():
            offline = np.stack([model.backbone(torch.tensor([tok.encode(t)])).layers[-1][0].mean(0).numpy()
                                for t in texts])
    else:  # the mean of the top layer's word vectors
        offline = np.stack([v[-1].mean(0) for v in embed(source, [t.split() for t in texts], layers=[-1])])
    assert cosines(served, offline).min() >= 0.9999
    if kind != "gpt":  # a pooling they cannot do is refused, not ignored
        with pytest.raises(ConfigError, match="word-level model .* mean of its words' vectors"):
            load_engine(ServeConfig(str(source), pooling="cls"))


def test_a_queue_smaller_than_a_request_may_be_is_refused_at_startup():
    with pytest.raises(ConfigError, match="queue_size=4 < max_inputs=256"):
        ServeConfig("slow", queue_size=4)  # a request of 5 inputs would get 503 Retry-After: 1 forever
    assert ServeConfig("slow", queue_size=4, max_inputs=4).queue_size == 4


def test_a_request_the_queue_can_never_hold_gets_413_not_503():
    cfg = ServeConfig("slow", port=0, log_level="warning", queue_size=8, max_inputs=8)
    cfg.queue_size = 2  # past the startup check: the batcher itself refuses what can never fit
    with running_server(cfg, engine=SlowEngine(0.0)) as url:
        status, head, body = request(url + "/v1/embeddings", "POST", {"input": ["a", "b", "c"]})
        assert status == 413 and "retry-after" not in head
        assert "3 inputs; this server queues at most 2" in body["error"]["message"]
        assert post(url + "/v1/embeddings", {"input": ["a", "b"]})[0] == 200
