"""The BiLSTM family (Tang et al. 2019's student): tiny random models, read and written as
task directories every command takes — shapes and padding invariance, save → load identical,
training lowers the loss, Predictor, ``muppets evaluate`` and serve ``/predict`` agree."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from _tiny_backbones import CORPUS  # noqa: E402

from muppets import families
from muppets.cli import main as cli_main
from muppets.errors import CheckpointError, ConfigError
from muppets.families.bilstm import BiLSTMConfig, new_student
from muppets.heads import SentenceVector, build_head
from muppets.nn.encoded import Encoded
from muppets.tokenizers import WordPieceTokenizer
from muppets.transfer import Predictor
from muppets.transfer.models import load_task_model, load_tokenizer, new_task_model, save_task_model

SIZES = dict(embedding_size=12, lstm_size=8, dropout=0.0)
POSITIVE, NEGATIVE = ["good", "great"], ["bad", "awful"]
FILLER = "the a river bank money movie film plot was is".split()


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def tok() -> WordPieceTokenizer:
    return WordPieceTokenizer.train(CORPUS, vocab_size=200, min_frequency=1)


def student(tok, kind="classify", labels=2, seed=0, **overrides):
    torch.manual_seed(seed)
    return new_student(kind, labels, tok.vocab_size, tok.pad_id, **{**SIZES, **overrides})


def batch(tok, texts):
    """``[CLS] text [SEP]`` rows padded with ``[PAD]``: ids and mask ``(B, T)``, as the features build them."""
    rows = [[tok.cls_id, *r, tok.sep_id] for r in tok.encode_batch(texts)]
    T = max(len(r) for r in rows)
    ids = torch.full((len(rows), T), tok.pad_id)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
    return ids, (ids != tok.pad_id).long()


def sentiment(n, seed):
    """Toy sentences: label pos when a positive word is in it, else neg."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = list(rng.choice(FILLER, 4)) + [str(rng.choice(POSITIVE if i % 2 else NEGATIVE))]
        rng.shuffle(words)
        out.append((" ".join(words), "pos" if i % 2 else "neg"))
    return out


def train(model, tok, data, steps=40):
    ids, mask = batch(tok, [t for t, _ in data])
    labels = torch.tensor([int(y == "pos") for _, y in data])
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(steps):
        loss = model(ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# ----------------------------------------------------------------------------- the model


def test_forward_shapes_and_padding_never_leaks(tok):
    model = student(tok, "classify", mlp_size=6).eval()
    ids, mask = batch(tok, ["a great movie", "the river bank was good and the plot was great"])
    encoded = model.backbone(ids, attention_mask=mask)
    B, T = ids.shape
    assert [tuple(x.shape) for x in encoded.layers] == [(B, T, 12), (B, T, 16)] and model.backbone.cfg.hidden_size == 16
    assert encoded.last[0, mask[0].sum():].abs().max() == 0  # zero at padding
    alone_ids, alone_mask = batch(tok, ["a great movie"])
    with torch.no_grad():
        alone = model.backbone(alone_ids, attention_mask=alone_mask).last[0]
        assert torch.allclose(alone, encoded.last[0, :alone.shape[0]], atol=1e-6)
        assert torch.allclose(model(alone_ids, attention_mask=alone_mask).logits[0],
                              model(ids, attention_mask=mask).logits[0], atol=1e-6)
        assert torch.equal(model(ids).logits, model(ids, attention_mask=mask).logits)  # mask from [PAD] ids


def test_max_pool_and_mlp_head_by_hand():
    h = torch.tensor([[[1.0, -2.0], [3.0, -4.0], [9.0, 9.0]]])  # (1, 3, 2); the last token is padding
    mask = torch.tensor([[True, True, False]])
    assert SentenceVector(2, "max")(Encoded([h], mask)).tolist() == [[3.0, -2.0]]
    head = build_head("classify", 2, 3, dropout_p=0.0, pool="max", mlp_size=5)
    v = torch.tensor([[3.0, -2.0]])
    by_hand = head.classifier(torch.relu(head.mlp[0](v)))
    assert torch.allclose(head(Encoded([h], mask)), by_hand)


def test_training_steps_lower_the_loss(tok):
    model = student(tok, "classify", mlp_size=8).train()
    losses = train(model, tok, sentiment(16, seed=0), steps=30)
    assert losses[-1] < 0.5 * losses[0]


def test_new_student_takes_an_embedding_table(tok):
    table = torch.randn(tok.vocab_size, 10)
    table[tok.pad_id] = 0
    model = new_student("pair", 3, tok.vocab_size, tok.pad_id, embeddings=table, lstm_size=4)
    assert model.family == "bilstm" and model.backbone.cfg.embedding_size == 10
    assert torch.equal(model.backbone.embeddings.weight, table)
    with pytest.raises(ConfigError, match=r"\(5, 10\)"):
        new_student("pair", 3, tok.vocab_size, tok.pad_id, embeddings=table[:5])
    with pytest.raises(ConfigError, match="lstm_size"):
        BiLSTMConfig(lstm_size=0)


# ----------------------------------------------------------------------------- directories


@pytest.mark.parametrize("kind,labels", [("classify", ["neg", "pos"]), ("pair", ["no", "yes"]),
                                         ("regress", []), ("tag", ["O", "B-PER", "B-LOC"])])
def test_save_load_round_trip_gives_identical_logits(tok, tmp_path, kind, labels):
    model = student(tok, kind, len(labels) or 1, mlp_size=6).eval()
    save_task_model(model, tmp_path, tok, labels)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "muppets-bilstm" and config["muppets_task"]["kind"] == kind
    assert config["architectures"][0].startswith("MuppetsBiLSTMFor")
    assert families.of_directory(tmp_path).name == "bilstm"
    assert "transformers has no class" in (tmp_path / "README.md").read_text()  # the card does not promise HF loading
    if labels:
        assert config["id2label"] == {str(i): x for i, x in enumerate(labels)}
    back = load_task_model(tmp_path).eval()
    assert back.kind == kind and back.family == "bilstm" and back.backbone.cfg == model.backbone.cfg
    ids, mask = batch(load_tokenizer(tmp_path), ["a great movie", "john went to paris and london"])
    with torch.no_grad():
        assert torch.equal(model(ids, attention_mask=mask).logits, back(ids, attention_mask=mask).logits)


def test_fine_tuning_a_saved_student_and_clear_refusals(tok, tmp_path):
    save_task_model(student(tok, "classify"), tmp_path / "s", tok, ["neg", "pos"])
    again = new_task_model(tmp_path / "s", "classify", 2, tok)
    assert again.fresh_head == []
    other = new_task_model(tmp_path / "s", "classify", 3, tok, pool="mean", dropout=0.2)
    assert other.fresh_head and other.head.vector.pool == "mean" and other.backbone.cfg.dropout == 0.2
    with pytest.raises(CheckpointError, match="no trained classify head"):
        load_task_model(tmp_path / "s", num_labels=3)
    with pytest.raises(CheckpointError, match="task model only"):
        families.get("bilstm").load(tmp_path / "s")
    from muppets.interop.onnx_export import export_onnx  # refuses before it needs onnx

    with pytest.raises(ConfigError, match="not exported to ONNX"):
        export_onnx(tmp_path / "s", tmp_path / "onnx")


def test_predictor_and_muppets_evaluate_read_a_trained_student(tok, tmp_path, capsys):
    model = student(tok, "classify", mlp_size=8)
    train(model, tok, sentiment(16, seed=0), steps=30)
    save_task_model(model.eval(), tmp_path / "best", tok, ["neg", "pos"], label_names=["negative", "positive"])
    dev = sentiment(12, seed=1)
    for split, rows in (("train", sentiment(8, seed=2)), ("dev", dev)):
        (tmp_path / f"{split}.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    predictor = Predictor(tmp_path / "best")
    ids, mask = batch(tok, [t for t, _ in dev])
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).logits.argmax(-1).tolist()
    got = predictor.predict([t for t, _ in dev])
    assert got == [["negative", "positive"][i] for i in expected]
    assert cli_main(["evaluate", str(tmp_path / "train.csv"), "--dev", str(tmp_path / "dev.csv"),
                     "--model", str(tmp_path / "best"), "--split", "dev",
                     "--predictions", str(tmp_path / "preds.jsonl")]) == 0
    accuracy = np.mean([["neg", "pos"][i] == y for i, (_, y) in zip(expected, dev)])
    assert f"{accuracy:10.4f}" in capsys.readouterr().out
    saved = [json.loads(x)["prediction"] for x in (tmp_path / "preds.jsonl").read_text().splitlines()]
    assert saved == [["neg", "pos"][i] for i in expected]


def test_a_tagger_predicts_one_tag_per_word(tok, tmp_path):
    labels = ["O", "B-PER", "B-LOC"]
    model = student(tok, "tag", len(labels), seed=2)
    with torch.no_grad():
        model.head.classifier.weight.mul_(40.0)  # spread the random head's outputs so that tags vary
    save_task_model(model, tmp_path, tok, labels)
    words = [["john", "went", "to", "paris"], ["mary", "was", "in", "london", "!"]]
    tags = Predictor(tmp_path).predict(words)
    assert [len(t) for t in tags] == [4, 5] and {t for row in tags for t in row} <= set(labels)
    assert len(tok.encode(" ".join(words[0]))) == 4  # one piece per word: word i is read at position i + 1
    ids, mask = batch(tok, [" ".join(words[0])])
    with torch.no_grad():
        best = model.eval()(ids, attention_mask=mask).logits[0].argmax(-1).tolist()
    assert tags[0] == [labels[i] for i in best[1:5]]


@pytest.mark.parametrize("kind", ["classify", "tag"])
def test_serve_predict_answers_as_predictor(tok, tmp_path, kind):
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from _serve_http import post, request

    from muppets.serve import ServeConfig, running_server

    labels = ["neg", "pos"] if kind == "classify" else ["O", "B-PER", "B-LOC"]
    model = student(tok, kind, len(labels), seed=3)
    with torch.no_grad():
        model.head.classifier.weight.mul_(40.0)
    save_task_model(model, tmp_path, tok, labels)
    inputs = (["a great movie", "awful plot", "the river bank was good"] if kind == "classify"
              else [["john", "went", "to", "paris"], "mary went to london"])
    expected = Predictor(tmp_path).predict(inputs)
    with running_server(ServeConfig(str(tmp_path), port=0, log_level="warning", max_wait_ms=1)) as url:
        status, body = post(url + "/predict", {"inputs": inputs})
        health = request(url + "/health")[2]
    assert status == 200, body
    assert health["routes"] == ["/predict"] and health["task"] == kind
    assert body["predictions"] == expected


def test_muppets_finetune_trains_a_saved_student(tok, tmp_path):
    """A saved fresh student is a ``--model`` like any other: finetune writes a BiLSTM best/."""
    save_task_model(student(tok, "classify", mlp_size=8), tmp_path / "student", tok, ["neg", "pos"])
    for split, rows in (("train", sentiment(16, seed=0)), ("dev", sentiment(8, seed=1))):
        (tmp_path / f"{split}.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    assert cli_main(["finetune", str(tmp_path / "train.csv"), "--dev", str(tmp_path / "dev.csv"),
                     "--model", str(tmp_path / "student"), f"run_dir={tmp_path / 'run'}", "epochs=1",
                     "batch_size=8", "max_seq_len=32", "progress=false", "device=cpu"]) == 0
    best = tmp_path / "run" / "best"
    assert families.of_directory(best).name == "bilstm" and load_task_model(best).head.mlp is not None
    assert len(Predictor(best).predict(["a good film"])) == 1
