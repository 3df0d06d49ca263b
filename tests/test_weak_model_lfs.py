"""Model-based LFs on tiny random models: a classifier and a tagger behind a threshold, a
zero-shot GPT prompt behind a margin; batched == one by one; the applier's column cache; and the
end model's data path (label matrix → label model → TaskData with probs → finetune.run)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from muppets.errors import ConfigError, LabelingFunctionError
from muppets.interop.hf_gpt import save_hf_gpt
from muppets.models.gpt import GPTConfig, GPTLanguageModel
from muppets.tasks.spec import TextExample
from muppets.tokenizers import ByteLevelBPETokenizer
from muppets.transfer import Predictor
from muppets.transfer.finetune import run
from muppets.transfer.models import new_task_model, save_task_model
from muppets.weak import ABSTAIN, LabelModel, apply_lfs, keyword_lf
from muppets.weak.model_lfs import predictor_lf, prototype_lf, tagger_lf, zero_shot_lf
from muppets.weak.pipeline import weak_task_data

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_finetune import CORPUS, cfg_for, model_dir, tok  # noqa: E402,F401  (fixtures)

TEXTS = ["the movie was good and great", "awful boring plot", "john went to paris",
         "mary and john", "a film", "really quite a lovely story and a superb plot",
         "dull terrible film", "the plot"]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def examples(texts=TEXTS) -> list[TextExample]:
    return [TextExample(f"e{i}", t, None, None, f"toy:{i}") for i, t in enumerate(texts)]


def _task_dir(root: Path, model_dir: Path, tok, kind: str, labels: list[str]) -> Path:
    torch.manual_seed(3)
    model = new_task_model(model_dir, kind, len(labels), tok)
    with torch.no_grad():  # spread the random head's outputs so probabilities differ clearly
        model.head.classifier.weight.mul_(40.0)
    return save_task_model(model, root, tok, labels) or root


@pytest.fixture(scope="module")
def clf_dir(tmp_path_factory, model_dir, tok) -> Path:
    return _task_dir(tmp_path_factory.mktemp("clf"), model_dir, tok, "classify", ["neg", "pos"])


@pytest.fixture(scope="module")
def tag_dir(tmp_path_factory, model_dir, tok) -> Path:
    return _task_dir(tmp_path_factory.mktemp("tagger"), model_dir, tok, "tag", TAGS)


@pytest.fixture(scope="module")
def gpt_dir(tmp_path_factory) -> Path:
    bpe = ByteLevelBPETokenizer.train(CORPUS, vocab_size=320, min_frequency=1)
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=bpe.vocab_size, max_position_embeddings=64, hidden_size=32,
                    num_layers=2, num_heads=4, intermediate_size=64, eos_token_id=bpe.eos_id)
    return save_hf_gpt(GPTLanguageModel(cfg), tmp_path_factory.mktemp("tiny-gpt"), bpe)


def test_predict_proba_matches_predict(clf_dir, tag_dir):
    clf = Predictor(clf_dir)
    probs = clf.predict_proba(TEXTS)
    assert probs.shape == (len(TEXTS), 2) and np.allclose(probs.sum(1), 1.0)
    assert [clf.labels[k] for k in probs.argmax(1)] == clf.predict(TEXTS)
    tagger = Predictor(tag_dir)
    words = [t.split() for t in TEXTS]
    rows = tagger.predict_proba(words)
    assert [r.shape for r in rows] == [(len(w), len(TAGS)) for w in words]
    assert [[TAGS[k] for k in r.argmax(1)] for r in rows] == tagger.predict(words)
    with pytest.raises(ConfigError, match="no class probabilities"):
        tagger.kind = "span"
        tagger.predict_proba(words)


def test_predictor_lf_votes_only_above_threshold(clf_dir):
    p_pos = Predictor(clf_dir).predict_proba(TEXTS)[:, 1]
    threshold = float(np.median(p_pos))
    lf = predictor_lf("positive", clf_dir, {"pos": 1}, threshold=threshold)
    votes = lf.label_batch(examples())
    assert votes == [1 if p >= threshold else ABSTAIN for p in p_pos]
    assert 0 < votes.count(ABSTAIN) < len(votes)
    assert votes == [lf(x) for x in examples()]  # batched == one by one
    both = predictor_lf("both", clf_dir, {"neg": 0, "pos": 1}, threshold=0.5)
    assert both.label_batch(examples()) == [int(p >= 0.5) for p in p_pos]
    with pytest.raises(ConfigError, match="not among"):
        predictor_lf("bad", clf_dir, {"positive": 1}).label_batch(examples())
    with pytest.raises(ConfigError, match="threshold"):
        predictor_lf("bad", clf_dir, {"pos": 1}, threshold=1.5)
    with pytest.raises(ConfigError, match="not found"):
        predictor_lf("bad", clf_dir / "missing", {"pos": 1})


def test_an_lf_file_with_a_model_lf_runs_from_the_cli(clf_dir, tmp_path, capsys):
    from muppets.cli import main
    lfs, texts = tmp_path / "lfs.py", tmp_path / "texts.txt"
    lfs.write_text("from muppets.weak import keyword_lf, predictor_lf\n"
                   f"LFS = [keyword_lf('kw_film', ['film'], 0), "
                   f"predictor_lf('positive', {str(clf_dir)!r}, {{'pos': 1}}, threshold=0.5)]\n",
                   encoding="utf-8")
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "labels.jsonl"
    assert main(["weak", "label", str(lfs), "--task", str(texts), "--model", "majority", "--keep-uncovered",
                 "--out", str(out), "--cache-dir", str(tmp_path / "cache")]) == 0
    assert len(out.read_text().splitlines()) == len(TEXTS)  # every row, those no LF votes on too
    assert list((tmp_path / "cache").glob("col-*.npy"))  # the model's column cached apart


def test_tagger_lf_votes_on_short_texts_with_the_entity(tag_dir):
    tokens = [t.split() for t in TEXTS]
    rows = Predictor(tag_dir).predict_proba(tokens)
    per = [float(r[:, 1:3].sum(1).max()) for r in rows]  # P(B-PER) + P(I-PER), best word
    threshold = float(np.median(per))
    lf = tagger_lf("has_person", tag_dir, "PER", 0, threshold=threshold, max_words=5)
    votes = lf.label_batch(examples())
    assert votes == [0 if p >= threshold and len(t) < 5 else ABSTAIN for p, t in zip(per, tokens)]
    assert votes == [lf(x) for x in examples()]
    with pytest.raises(ConfigError, match="no 'ORG' tags"):
        tagger_lf("org", tag_dir, "ORG", 0).label_batch(examples())


def test_zero_shot_lf_votes_by_margin_and_calibrates(gpt_dir):
    verbalizers = {0: [" bad", " awful"], 1: " good"}
    raw = zero_shot_lf("zs", gpt_dir, "{text} . it was", verbalizers, calibrate=False)
    scores = raw.scores(TEXTS)
    assert scores.shape == (len(TEXTS), 2)
    gaps = np.abs(scores[:, 1] - scores[:, 0])
    margin = float(np.median(gaps))
    lf = zero_shot_lf("zs", gpt_dir, "{text} . it was", verbalizers, margin=margin, calibrate=False)
    votes = lf.label_batch(examples())
    assert votes == [int(s.argmax()) if g >= margin else ABSTAIN for s, g in zip(scores, gaps)]
    assert 0 < votes.count(ABSTAIN) < len(votes)
    assert votes == [lf(x) for x in examples()]
    calibrated = zero_shot_lf("zs", gpt_dir, "{text} . it was", verbalizers).scores(TEXTS)
    assert np.allclose(calibrated - scores, (calibrated - scores)[0])  # minus one row (N/A)
    assert lf.cache_key() != raw.cache_key()
    with pytest.raises(ConfigError, match="slot"):
        zero_shot_lf("zs", gpt_dir, "no slot", verbalizers)


def test_prototype_lf_votes_the_closest_class_by_margin(model_dir):
    protos = {0: ["awful boring plot", "dull terrible film"], 1: ["a lovely superb story"]}
    raw = prototype_lf("proto", model_dir, protos)
    sims = raw.similarities(TEXTS)
    assert sims.shape == (len(TEXTS), 2) and np.all(np.abs(sims) <= 1 + 1e-6)
    one = prototype_lf("p", model_dir, {0: ["awful boring plot"], 1: ["a lovely superb story"]})
    other = prototype_lf("p", model_dir, {0: ["dull terrible film"], 1: ["a lovely superb story"]})
    single = one.similarities(TEXTS)
    assert single[1, 0] == pytest.approx(1.0, abs=1e-5)  # the text is its prototype
    assert sims[:, 0] == pytest.approx((single[:, 0] + other.similarities(TEXTS)[:, 0]) / 2, abs=1e-6)
    gaps = np.abs(sims[:, 1] - sims[:, 0])
    margin = float(np.median(gaps))
    lf = prototype_lf("proto", model_dir, protos, margin=margin)
    votes = lf.label_batch(examples())
    assert votes == [int(s.argmax()) if g >= margin else ABSTAIN for s, g in zip(sims, gaps)]
    assert 0 < votes.count(ABSTAIN) < len(votes)
    assert votes == [lf(x) for x in examples()]
    with pytest.raises(ConfigError, match="2 or more"):
        prototype_lf("proto", model_dir, {0: ["bad"]})


class FixedPredictor:
    """A stand-in Predictor whose probabilities are written by hand."""

    def __init__(self, labels, rows):
        self.labels, self.rows = labels, rows

    def predict_proba(self, inputs):
        assert len(inputs) == len(self.rows)
        return self.rows


def test_vote_rules_on_fixed_scores_give_fixed_labels(clf_dir, tag_dir, model_dir):
    """The threshold and margin rules against hand-written scores and hand-written votes
    (the tests above check the rules on real model outputs, but with the rules' own formula)."""
    from muppets.weak.model_lfs import _vote_by_margin

    scores = np.array([[0.1, 0.5], [0.3, 0.2], [0.4, 0.4], [0.9, 0.1]])
    assert _vote_by_margin(scores, [0, 1], 0.15) == [1, ABSTAIN, ABSTAIN, 0]
    assert _vote_by_margin(scores, [0, 1], 0.0) == [1, 0, ABSTAIN, 0]  # a tie abstains
    assert _vote_by_margin(np.array([[1.0, 2.0, 3.0], [3.0, 2.9, 0.0]]), [0, 3, 7], 0.5) == [7, ABSTAIN]
    rows = np.array([[0.95, 0.05], [0.2, 0.8], [0.5, 0.5], [0.08, 0.92]])
    pos = predictor_lf("positive", clf_dir, {"pos": 1}, threshold=0.9)
    pos.__dict__["predictor"] = FixedPredictor(["neg", "pos"], rows)
    assert pos.label_batch(examples(TEXTS[:4])) == [ABSTAIN, ABSTAIN, ABSTAIN, 1]
    both = predictor_lf("both", clf_dir, {"neg": 0, "pos": 1}, threshold=0.6)
    both.__dict__["predictor"] = FixedPredictor(["neg", "pos"], rows)
    assert both.label_batch(examples(TEXTS[:4])) == [0, 1, ABSTAIN, 1]
    per = tagger_lf("has_person", tag_dir, "PER", 0, threshold=0.7, max_words=5)
    words = [np.array([[0.9, 0.05, 0.05, 0, 0], [0.2, 0.5, 0.3, 0, 0]]),  # PER 0.8 on "went": votes
             np.array([[0.4, 0.3, 0.2, 0.1, 0.0]] * 3)]  # PER 0.5 at best: abstains
    per.__dict__["predictor"] = FixedPredictor(TAGS, words)
    # texts of 2 and 3 words (under max_words), one of 6 words (over: abstains without the model)
    texts = ["mary went", "the plot thickens", "really quite a lovely story and"]
    assert per.label_batch(examples(texts)) == [0, ABSTAIN, ABSTAIN]


def test_applier_runs_a_model_lf_once_and_caches_its_column(clf_dir, tmp_path, monkeypatch):
    lf = predictor_lf("positive", clf_dir, {"pos": 1}, threshold=0.5)
    calls = []
    real = type(lf).label_batch
    monkeypatch.setattr(type(lf), "label_batch", lambda self, exs: calls.append(len(exs)) or real(self, exs))
    kw = keyword_lf("film", ["film"], 0)
    L = apply_lfs([kw, lf], examples(), 2, cache_dir=tmp_path)
    assert calls == [len(TEXTS)]  # one batched call for the column
    assert L[:, 1].tolist() == real(lf, examples()) and L[:, 0].tolist() == [kw(x) for x in examples()]
    assert np.array_equal(apply_lfs([kw, lf], examples(), 2, cache_dir=tmp_path, n_jobs=2), L)
    other = keyword_lf("plot", ["plot"], 0)  # a new matrix, but the model's column is cached
    L2 = apply_lfs([other, lf], examples(), 2, cache_dir=tmp_path)
    assert calls == [len(TEXTS)] and np.array_equal(L2[:, 1], L[:, 1])


def test_a_model_lf_that_fails_is_named(clf_dir):
    lf = predictor_lf("positive", clf_dir, {"pos": 1})
    lf.label_batch = lambda exs: [7] * len(exs)
    with pytest.raises(LabelingFunctionError, match="'positive' on example 0"):
        apply_lfs([lf], examples(), 2)


def test_end_model_data_path(model_dir, tmp_path):
    """LFs → L → LabelModel → TaskData with probs (gold replaced) → a few fine-tuning steps."""
    rng = np.random.default_rng(0)
    pos, neg = ["good", "great", "nice"], ["bad", "awful", "dull"]
    train = []
    for i in range(32):
        words = list(rng.choice(pos if i % 2 else neg, 2)) + ["film"]
        train.append(TextExample(f"t{i}", " ".join(words), None, str(i % 2), "toy"))
    lfs = [keyword_lf(f"kw_{w}", [w], 1) for w in pos] + [keyword_lf(f"kw_{w}", [w], 0) for w in neg]
    L = apply_lfs(lfs, train, 2)
    lm = LabelModel(2).fit(L)
    covered = (L != ABSTAIN).any(axis=1)
    dev = [TextExample(f"d{i}", t, None, lab, "toy") for i, (t, lab) in
           enumerate([("good film", "1"), ("bad film", "0")] * 4)]
    data = weak_task_data("toy-weak", ["0", "1"], train, lm.predict_proba(L),
                          {"dev": dev, "test": dev}, keep=covered)
    assert len(data["train"]) == int(covered.sum())
    assert all(ex.label == str(int(np.argmax(ex.probs))) for ex in data["train"])
    assert train[0].probs is None  # the caller's examples are not changed
    summary = run(cfg_for(model_dir, tmp_path / "run", selection="dev"), data=data)
    assert summary["selection"] == "dev" and "accuracy" in summary["test"]
    with pytest.raises(ConfigError, match="probs of shape"):
        weak_task_data("x", ["0", "1"], train, np.ones((3, 2)) / 2)
