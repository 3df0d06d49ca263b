"""Answers in the shapes people use: raw-text NER equal to transformers' token-classification
pipeline (``aggregation_strategy="simple"``) on the same weights, offsets included, here and
through ``/predict``; classifier label + score and QA answer + character span against
transformers' pipelines; the entity grouping rules by hand."""

from __future__ import annotations

import doctest
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from muppets.interop.hf_bert import save_hf_bert
from muppets.models.bert import BertConfig, BertForPreTraining
from muppets.tokenizers import WordPieceTokenizer
from muppets.transfer import Predictor
from muppets.transfer import entities as entities_module
from muppets.transfer.entities import group_entities, piece_windows
from muppets.transfer.features import FeatureOptions
from muppets.transfer.models import new_task_model, save_task_model

transformers = pytest.importorskip("transformers")

DATA = Path(os.environ.get("MUPPETS_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
CONLL_TEST = DATA / "conll2003" / "eng.testb"
NER_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
N_SENTENCES = 50


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def conll_sentences(path: Path, n: int) -> list[list[str]]:
    """The first ``n`` sentences (token lists) of a CoNLL-2003 file, -DOCSTART- skipped."""
    sentences, words = [], []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if not parts or parts[0] == "-DOCSTART-":
                if words:
                    sentences.append(words)
                    words = []
                if len(sentences) == n:
                    break
                continue
            words.append(parts[0])
    return sentences


@pytest.fixture(scope="module")
def texts() -> list[str]:
    if not CONLL_TEST.is_file():
        pytest.skip(f"CoNLL-2003 test file not staged at {CONLL_TEST}")
    sentences = [" ".join(words) for words in conll_sentences(CONLL_TEST, N_SENTENCES)]
    return [" ".join(sentences[i:i + 2]) for i in range(0, len(sentences), 2)]  # two sentences a text


def _tiny_encoder(root: Path, corpus: list[str], lowercase: bool = True) -> tuple[Path, WordPieceTokenizer]:
    tok = WordPieceTokenizer.train(corpus, vocab_size=2000, min_frequency=1, lowercase=lowercase)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=2, num_heads=4,
                     intermediate_size=37, max_position_embeddings=512, pad_token_id=tok.pad_id)
    save_hf_bert(BertForPreTraining(cfg), root / "encoder", tok)
    return root / "encoder", tok


def _task(encoder: Path, tok, kind: str, labels: list[str], out: Path, scale: float = 40.0) -> Path:
    torch.manual_seed(3)
    model = new_task_model(encoder, kind, len(labels) or None, tok)
    with torch.no_grad():  # spread the random head's outputs so that predictions vary
        (model.head.qa_outputs if kind == "span" else model.head.classifier).weight.mul_(scale)
    save_task_model(model, out, tok, labels)
    return out


@pytest.fixture(scope="module")
def tagger(tmp_path_factory, texts) -> Path:
    root = tmp_path_factory.mktemp("ner")
    encoder, tok = _tiny_encoder(root, texts, lowercase=False)
    return _task(encoder, tok, "tag", NER_LABELS, root / "tagger")


def _hf_groups(groups: list[dict]) -> list[tuple]:
    return [(g["entity_group"], g["start"], g["end"]) for g in groups]


def test_raw_text_entities_equal_the_transformers_pipeline_offsets_included(tagger, texts):
    predictor = Predictor(tagger, features=FeatureOptions(max_seq_len=512))
    assert max(len(e.ids) for e in predictor.tokenizer.encodings(texts)) <= 510  # one window: no cut either side
    ours = predictor.predict(texts)
    pipe = transformers.pipeline("token-classification", model=str(tagger), aggregation_strategy="simple",
                                 device="cpu")
    theirs = pipe(texts)
    n_entities = sum(len(t) for t in theirs)
    assert n_entities >= 20, "the random tagger should predict entities to compare"
    for text, got, want in zip(texts, ours, theirs):
        assert _hf_groups(got) == _hf_groups(want), text
        assert np.allclose([g["score"] for g in got], [w["score"] for w in want], atol=1e-4)
        assert all(g["word"] == text[g["start"]:g["end"]] for g in got)
    assert len({g["entity_group"] for t in ours for g in t}) >= 2  # several kinds show up


def test_the_server_returns_the_same_entity_groups(tagger, texts):
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from _serve_http import post
    from muppets.serve import ServeConfig, running_server

    predictor = Predictor(tagger)
    inputs = texts[:6] + [["Peter", "lives", "in", "Berlin"]]
    expected, probs = predictor.predict(inputs), predictor.predict_proba(inputs[5:])
    with running_server(ServeConfig(str(tagger), port=0, log_level="warning", max_wait_ms=1,
                                    max_chars=2000)) as url:
        status, body = post(url + "/predict", {"inputs": inputs})
        status_p, body_p = post(url + "/predict", {"inputs": inputs[5:], "return_probabilities": True})
    assert status == 200 and status_p == 200, (body, body_p)
    got = body["predictions"]
    assert [_hf_groups(g) for g in got[:6]] == [_hf_groups(e) for e in expected[:6]]
    assert np.allclose([g["score"] for t in got[:6] for g in t], [e["score"] for t in expected[:6] for e in t])
    assert got[6] == expected[6] and len(got[6]) == 4  # pre-split words: one tag each, as before
    assert _hf_groups(body_p["predictions"][0]) == _hf_groups(got[5]) and body_p["predictions"][1] == got[6]
    (raw, split), (raw_words, split_words) = body_p["probabilities"], body_p["words"]
    assert [(w["word"], w["start"], w["end"]) for w in raw_words] == [
        (w, a, b) for w, (a, b) in zip(probs[0].words, probs[0].spans)] and split_words is None
    assert np.allclose([[p[label] for label in NER_LABELS] for p in raw], probs[0].probs)
    assert np.allclose([[p[label] for label in NER_LABELS] for p in split], probs[1])


def test_predict_proba_of_raw_text_equals_transformers_first_pieces_and_the_pre_split_words(tagger, texts):
    """A raw text's words (the tokenizer's), their spans and per-word rows read at the first
    piece, as the HF model gives them on the same weights; the same rows as the pre-split words."""
    predictor = Predictor(tagger, features=FeatureOptions(max_seq_len=512))
    got = predictor.predict_proba(texts[:4])
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(tagger))
    model = transformers.AutoModelForTokenClassification.from_pretrained(str(tagger)).eval()
    for text, ours in zip(texts[:4], got):
        enc = hf_tok(text, return_offsets_mapping=True, return_tensors="pt")
        with torch.no_grad():
            probs = torch.softmax(model(input_ids=enc["input_ids"]).logits[0].double(), -1).numpy()
        word_ids, offsets = enc.word_ids(), enc["offset_mapping"][0].tolist()
        firsts = [t for t, w in enumerate(word_ids) if w is not None and (t == 0 or word_ids[t - 1] != w)]
        ends = {w: offsets[t][1] for t, w in enumerate(word_ids) if w is not None}
        assert ours.spans == [(offsets[t][0], ends[word_ids[t]]) for t in firsts]
        assert ours.words == [text[a:b] for a, b in ours.spans]
        assert np.allclose(ours.probs, probs[firsts], atol=1e-5)
        assert np.allclose(ours.probs.sum(1), 1.0)
    assert np.allclose(predictor.predict_proba([got[0].words])[0], got[0].probs, atol=1e-5)
    mixed = predictor.predict_proba([texts[0], got[1].words])  # raw text and words in one call, in order
    assert mixed[0].words == got[0].words and np.allclose(mixed[1], got[1].probs, atol=1e-5)
    assert predictor.predict_proba(["   "])[0].probs.shape == (0, len(NER_LABELS))


def test_long_text_is_read_in_windows_of_whole_words(tagger, texts):
    """A text longer than max_seq_len: windows cover every piece once (the pipeline would cut)."""
    short = Predictor(tagger, features=FeatureOptions(max_seq_len=16))
    full = Predictor(tagger)
    got, want = short.predict(texts[:3]), full.predict(texts[:3])
    starts = [[g["start"] for g in t] for t in got]
    assert all(s == sorted(s) for s in starts)
    # the windows change the context, not the coverage: every entity lies inside the text
    assert all(0 <= g["start"] < g["end"] <= len(text) for text, t in zip(texts, got) for g in t)
    assert sum(map(len, want)) > 0


def test_grouping_rules_by_hand():
    pieces = [("I-PER", 0.5, 0, 2), ("I-PER", 0.7, 2, 4),  # I- after nothing opens a group
              ("B-PER", 0.9, 5, 8), ("O", 0.99, 9, 10),
              ("I-LOC", 0.6, 11, 14), ("B-LOC", 0.8, 15, 18), ("I-ORG", 0.4, 18, 20)]
    text = "JoJo Ann x Rio Oslo!!"
    got = group_entities(pieces, text)
    assert [(g["entity_group"], g["start"], g["end"]) for g in got] == [
        ("PER", 0, 4), ("PER", 5, 8), ("LOC", 11, 14), ("LOC", 15, 18), ("ORG", 18, 20)]
    assert got[0]["score"] == pytest.approx(0.6) and got[0]["word"] == "JoJo"
    assert piece_windows([], 4) == [(0, 0)] and piece_windows([0, 0, 0, 0, 0], 3) == [(0, 3)]


def test_docstring_examples_run():
    assert doctest.testmod(entities_module).failed == 0


# ----------------------------------------------------------------------------- classify, QA


@pytest.fixture(scope="module")
def small(tmp_path_factory, texts) -> tuple[Path, WordPieceTokenizer]:
    return _tiny_encoder(tmp_path_factory.mktemp("small"), texts + ["who what where is ? ."])


def test_classifier_label_and_score_equal_the_text_classification_pipeline(small, tmp_path):
    encoder, tok = small
    clf = _task(encoder, tok, "classify", ["neg", "pos", "mixed"], tmp_path / "clf", scale=200.0)
    inputs = ["Japan began the defence of their Asian Cup title", "Nadim Ladki", "AL-AIN , United Arab Emirates"]
    ours = Predictor(clf)(inputs, all_scores=True)
    pipe = transformers.pipeline("text-classification", model=str(clf), device="cpu", top_k=None)
    for got, want in zip(ours, pipe(inputs)):
        best = max(want, key=lambda w: w["score"])
        assert got["label"] == best["label"] and got["score"] == pytest.approx(best["score"], abs=1e-5)
        assert got["scores"] == pytest.approx({w["label"]: w["score"] for w in want}, abs=1e-5)
    one = Predictor(clf)(inputs[0])
    assert set(one) == {"label", "score"} and one["label"] == ours[0]["label"]
    assert one["score"] == pytest.approx(ours[0]["score"], abs=1e-5)
    assert Predictor(clf).predict(inputs) == [o["label"] for o in ours]  # the old shape stays


def test_qa_answer_and_character_span(small, tmp_path):
    encoder, tok = small
    qa = _task(encoder, tok, "span", [], tmp_path / "qa", scale=10.0)
    pairs = [("Who won ?", "Japan began the defence of their Asian Cup title with a lucky 2-1 win against Syria ."),
             ("Where ?", "AL-AIN , United Arab Emirates 1996-12-06")]
    answers = Predictor(qa).predict(pairs)
    for (question, context), a in zip(pairs, answers):
        assert set(a) == {"answer", "score", "start", "end"}
        assert a["answer"] and context[a["start"]:a["end"]] == a["answer"]
    # transformers 5 has no question-answering pipeline: the oracle is HF's model on the same
    # weights and a brute-force search over spans on word edges (<= 30 tokens), read back by offsets
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(qa))
    hf = transformers.AutoModelForQuestionAnswering.from_pretrained(str(qa)).eval()
    for (question, context), a in zip(pairs, answers):
        enc = hf_tok(question, context, return_offsets_mapping=True, return_tensors="pt")
        with torch.no_grad():
            out = hf(input_ids=enc["input_ids"], token_type_ids=enc["token_type_ids"],
                     attention_mask=enc["attention_mask"])
        seq, words = enc.sequence_ids(0), enc.word_ids(0)
        ctx = [t for t, s in enumerate(seq) if s == 1]
        first = [t for t in ctx if words[t - 1] != words[t] or seq[t - 1] != 1]
        last = [t for t in ctx if t + 1 >= len(seq) or seq[t + 1] != 1 or words[t + 1] != words[t]]
        start_lg, end_lg = out.start_logits[0], out.end_logits[0]
        best = max((float(start_lg[i] + end_lg[j]), i, j) for i in first for j in last if 0 <= j - i < 30)
        offsets = enc["offset_mapping"][0]
        assert (a["start"], a["end"]) == (int(offsets[best[1]][0]), int(offsets[best[2]][1]))
        assert a["score"] == pytest.approx(best[0], abs=1e-4)
