"""Label names (issue 51, item 5): registered tasks name their labels (SST-2's 0/1 are negative /
positive); a saved model keeps them as ``id2label`` (transformers' pipeline shows them) beside the
task's own label values; ``Predictor``, ``/predict`` and ``weak`` answer with the names; a model
directory saved before names were kept still loads, with its label values as names."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from _tiny_backbones import tiny_bert

from muppets.cli import main as cli_main
from muppets.tasks import load_task
from muppets.tasks.spec import TaskSpec
from muppets.errors import ConfigError
from muppets.transfer import Predictor
from muppets.transfer.models import load_tokenizer, new_task_model, save_task_model

TEXTS = ["a great movie", "bad plot , awful film !", "the river bank was good"]
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "weak" / "spam_lfs.py"


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def sst2_dir(tmp_path_factory) -> Path:
    """A tiny random classifier saved as fine-tuning saves an SST-2 model: labels 0/1, names."""
    base = tiny_bert(tmp_path_factory.mktemp("bert"))
    tok = load_tokenizer(base)
    torch.manual_seed(3)
    out = tmp_path_factory.mktemp("sst2")
    spec = load_task("sst2").spec
    save_task_model(new_task_model(base, "classify", 2, tok), out, tok, spec.labels, label_names=spec.names)
    return out


def test_registered_tasks_name_their_labels_the_way_the_data_reads():
    names = {t: load_task(t).spec for t in ("sst2", "cola", "mrpc", "youtube-spam", "pawsx-en", "xnli-en")}
    assert names["sst2"].names == ["negative", "positive"] and names["sst2"].labels == ["0", "1"]
    assert names["cola"].names == ["unacceptable", "acceptable"]
    assert names["mrpc"].names == ["not_equivalent", "equivalent"]
    assert names["youtube-spam"].names == ["ham", "spam"]
    assert names["pawsx-en"].names == ["not_paraphrase", "paraphrase"]
    assert names["xnli-en"].names == ["entailment", "neutral", "contradiction"]  # HF's MNLI / XNLI order
    # the names sit on the right values: cue words vote with the label they are named after
    for task, cue, expected in (("sst2", r"\b(great|wonderful|best)\b", "positive"),
                                ("sst2", r"\b(worst|dull|boring)\b", "negative"),
                                ("youtube-spam", r"subscribe|check out|http", "spam")):
        data = load_task(task)
        named = dict(zip(data.spec.labels, data.spec.names))
        votes = Counter(named[ex.label] for ex in data["train"] if re.search(cue, ex.text.lower()))
        assert votes.most_common(1)[0][0] == expected and votes[expected] > 0.7 * sum(votes.values()), (task, votes)
    xnli_file = {line.split("\t")[2].strip() for line in
                 (Path(load_task("xnli-en")["train"][0].source.rsplit(":", 1)[0])).read_text("utf-8").splitlines()}
    assert xnli_file == set(names["xnli-en"].labels)
    with pytest.raises(ConfigError, match="must name each of the labels"):
        TaskSpec("x", "classify", ["0", "1"], "accuracy", ("text",), ("neg",))


def test_predictor_answers_with_names_and_an_old_directory_with_its_labels(sst2_dir, tmp_path):
    config = json.loads((sst2_dir / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"}
    assert config["label2id"] == {"negative": 0, "positive": 1}
    assert config["muppets_task"]["labels"] == ["0", "1"]  # what evaluation compares with the files
    pred = Predictor(sst2_dir)
    assert pred.labels == ["0", "1"] and pred.names == ["negative", "positive"]
    probs = pred.predict_proba(TEXTS)
    expected = [pred.names[i] for i in probs.argmax(1)]
    assert pred.predict(TEXTS) == expected
    answers = pred(TEXTS, all_scores=True)
    assert [a["label"] for a in answers] == expected
    assert all(set(a["scores"]) == {"negative", "positive"} and a["score"] == pytest.approx(max(a["scores"].values()))
               for a in answers)
    # a directory written before names were kept: muppets_task without label_names, id2label = labels
    old = tmp_path / "old"
    old.mkdir()
    for f in sst2_dir.iterdir():
        (old / f.name).write_bytes(f.read_bytes())
    del config["muppets_task"]["label_names"]
    config.update(id2label={"0": "0", "1": "1"}, label2id={"0": 0, "1": 1})
    (old / "config.json").write_text(json.dumps(config))
    legacy = Predictor(old)
    assert legacy.names == legacy.labels == ["0", "1"]
    assert legacy.predict(TEXTS) == [str(i) for i in probs.argmax(1)]
    assert np.allclose(legacy.predict_proba(TEXTS), probs)


def test_transformers_pipeline_shows_the_names(sst2_dir):
    transformers = pytest.importorskip("transformers")
    pipe = transformers.pipeline("text-classification", model=str(sst2_dir), device=-1, top_k=None)
    ours = Predictor(sst2_dir)(TEXTS, all_scores=True)
    for theirs, mine in zip(pipe(TEXTS), ours):
        assert {d["label"] for d in theirs} == {"negative", "positive"}
        assert {d["label"]: d["score"] for d in theirs} == pytest.approx(mine["scores"], abs=1e-5)


def test_predict_route_answers_with_names(sst2_dir):
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from _serve_http import post, request

    from muppets.serve import ServeConfig, running_server

    expected = Predictor(sst2_dir)(TEXTS, all_scores=True)
    with running_server(ServeConfig(str(sst2_dir), port=0, log_level="warning", max_wait_ms=1)) as url:
        status, body = post(url + "/predict", {"inputs": TEXTS, "return_probabilities": True})
        health = request(url + "/health")[2]
    assert status == 200, body
    assert body["predictions"] == [e["label"] for e in expected]
    assert body["scores"] == pytest.approx([e["score"] for e in expected], abs=1e-6)
    assert [set(p) for p in body["probabilities"]] == [{"negative", "positive"}] * len(TEXTS)
    assert health["labels"] == ["negative", "positive"]


def test_weak_label_counts_and_the_lf_table_use_the_names(tmp_path, capsys):
    argv = ["--task", "youtube-spam", "--split", "dev", "--cache-dir", str(tmp_path / "cache")]
    assert cli_main(["weak", "analyze", str(EXAMPLES), *argv]) == 0
    table = capsys.readouterr().out
    assert re.search(r"keyword_song\s+\[ham\]", table) and re.search(r"keyword_subscribe\s+\[spam\]", table)
    out = tmp_path / "labels.jsonl"
    assert cli_main(["weak", "label", str(EXAMPLES), *argv, "--model", "majority", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert re.search(r": ham \d+\.\d%, spam \d+\.\d%", printed)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert set(rows[0]["probs"]) == {"0", "1"}  # the file keeps the task's label values (finetune reads them)
