"""metrics.py: hand-computed cases, parity with sklearn / scipy / seqeval, official SQuAD v1.1 on real dev.

sklearn, scipy and seqeval are test oracles only. Real-data tests read CoNLL-2003 ``eng.testb``
and SQuAD v1.1 ``dev-v1.1.json`` from the shared data directory (skipped if it is absent).
"""

from __future__ import annotations

import doctest
import json
import math
import random
import re
import string
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import muppets.metrics as M
from muppets.errors import ConfigError, DataError, MuppetsError
from muppets.paths import data_dir

TYPES = ("PER", "LOC", "ORG", "MISC")
BIO_TAGS = ["O"] + [f"{p}-{t}" for t in TYPES for p in "BI"]
IOBES_TAGS = ["O"] + [f"{p}-{t}" for t in TYPES for p in "BIES"]


def _shared_file(relative: str) -> Path:
    try:
        path = data_dir() / relative
    except MuppetsError:
        pytest.skip("shared data directory not found")
    if not path.is_file():
        pytest.skip(f"{relative} not staged")
    return path


def test_docstring_examples_run() -> None:
    result = doctest.testmod(M, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 10 and result.failed == 0


# ============================================================================ classification: by hand


def test_accuracy_by_hand() -> None:
    assert M.accuracy([0, 1, 2, 2], [0, 1, 1, 2]) == 0.75
    assert M.accuracy(["a", "b"], ["a", "b"]) == 1.0


def test_precision_recall_f1_by_hand() -> None:
    pred = [1, 1, 1, 0, 0, 0, 1]
    gold = [1, 0, 1, 1, 0, 0, 0]  # TP = 2, FP = 2, FN = 1
    prf = M.precision_recall_f1(pred, gold)
    assert prf.precision == pytest.approx(2 / 4) and prf.recall == pytest.approx(2 / 3)
    assert prf.f1 == pytest.approx(2 * 2 / (2 * 2 + 2 + 1))  # 2TP / (2TP + FP + FN) = 4/7
    assert M.f1_binary(pred, gold) == pytest.approx(4 / 7)
    # the other class as positive: TP = 2 (indices 4, 5), FP = 1, FN = 2
    assert M.f1_binary(pred, gold, positive=0) == pytest.approx(4 / 7)
    assert M.f1_binary(["yes", "no"], ["yes", "yes"], positive="yes") == pytest.approx(2 / 3)


def test_precision_recall_f1_undefined_is_zero() -> None:
    assert M.precision_recall_f1([0, 0, 0], [1, 0, 1]) == (0.0, 0.0, 0.0)  # nothing predicted
    assert M.precision_recall_f1([1, 0, 0], [0, 0, 0]) == (0.0, 0.0, 0.0)  # no gold positive


def test_macro_f1_by_hand() -> None:
    # a: F1 1; b: P 1/2, R 1 -> 2/3; c: 0  => (1 + 2/3 + 0) / 3
    assert M.macro_f1(["a", "b", "b"], ["a", "b", "c"]) == pytest.approx(5 / 9)
    assert M.macro_f1(["a", "b", "b"], ["a", "b", "c"], labels=["a", "b"]) == pytest.approx(5 / 6)


def _from_table(tp: int, fn: int, fp: int, tn: int) -> tuple[list[int], list[int]]:
    pred = [1] * tp + [0] * fn + [1] * fp + [0] * tn
    gold = [1] * tp + [1] * fn + [0] * fp + [0] * tn
    return pred, gold


def test_mcc_on_a_2x2_table_by_hand() -> None:
    pred, gold = _from_table(tp=3, fn=2, fp=1, tn=4)
    # (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (12 - 2) / sqrt(4*5*5*6)
    assert M.matthews_corrcoef(pred, gold) == pytest.approx(10 / math.sqrt(600), abs=1e-15)
    assert M.matthews_corrcoef([1, 0, 1], [1, 0, 1]) == pytest.approx(1.0)
    assert M.matthews_corrcoef([0, 1, 0], [1, 0, 1]) == pytest.approx(-1.0)


def test_mcc_undefined_is_zero() -> None:
    assert M.matthews_corrcoef([1, 1, 1, 1], [1, 0, 1, 0]) == 0.0  # constant prediction
    assert M.matthews_corrcoef([1, 0, 1, 0], [0, 0, 0, 0]) == 0.0  # constant gold


def test_mcc_multiclass_by_hand() -> None:
    # C (gold rows, pred cols) = [[2,0,0],[0,1,1],[1,0,1]]: c=4, s=6, t=(2,2,2), p=(3,1,2)
    pred = [0, 0, 1, 2, 0, 2]
    gold = [0, 0, 1, 1, 2, 2]
    expected = (4 * 6 - (2 * 3 + 2 * 1 + 2 * 2)) / math.sqrt((36 - (9 + 1 + 4)) * (36 - 12))
    assert M.matthews_corrcoef(pred, gold) == pytest.approx(expected, abs=1e-15)


# ============================================================================ correlation: by hand


def test_pearson_by_hand() -> None:
    # deviations (-1.5, -.5, .5, 1.5) and (-.5, -1.5, 1.5, .5): 3 / sqrt(5 * 5)
    assert M.pearson([1, 2, 3, 4], [2, 1, 4, 3]) == pytest.approx(0.6, abs=1e-15)
    assert M.pearson([1, 2, 3], [-2, -4, -6]) == pytest.approx(-1.0)


def test_pearson_of_a_constant_is_nan() -> None:
    assert math.isnan(M.pearson([1, 1, 1], [1, 2, 3]))


def test_average_ranks_and_spearman_with_ties_by_hand() -> None:
    assert M.average_ranks([3.0, 1.0, 3.0, 3.0, 0.5]).tolist() == [4.0, 2.0, 4.0, 4.0, 1.0]
    # ranks (1, 2.5, 2.5, 4) and (1, 3, 2, 4): 4.5 / sqrt(4.5 * 5) = sqrt(0.9)
    assert M.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(math.sqrt(0.9), abs=1e-15)
    assert M.spearman([1, 2, 3, 4], [1, 8, 27, 64]) == pytest.approx(1.0)  # monotone, not linear


# ============================================================================ errors


@pytest.mark.parametrize(
    "call",
    [
        lambda: M.accuracy([1, 2], [1]),
        lambda: M.accuracy([], []),
        lambda: M.accuracy([1, 0], ["1", "0"]),
        lambda: M.pearson([1.0], [2.0]),
        lambda: M.pearson([1.0, float("nan")], [1.0, 2.0]),
        lambda: M.entity_f1([["O"]], [["O"], ["O"]]),
        lambda: M.entity_f1([["O", "O"]], [["O"]]),
        lambda: M.entity_f1([["B-PER"]], [["E-PER"]]),  # E is not a BIO prefix
        lambda: M.entity_spans(["PER"]),
        lambda: M.entity_spans(["B-"]),
        lambda: M.squad_f1("x", []),
        lambda: M.squad_scores({}, {"version": "1.1"}),
    ],
)
def test_bad_input_raises_data_error(call) -> None:
    with pytest.raises(DataError):
        call()


def test_unknown_names_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown metric"):
        M.compute("bleu", [1], [1])
    with pytest.raises(ConfigError, match="scheme"):
        M.entity_spans(["O"], scheme="IOE2")


def test_bad_tag_error_names_sentence_token_and_value() -> None:
    with pytest.raises(DataError, match=r"sentence 1, token 2: .*'X-PER'"):
        M.entity_f1([["O"], ["O", "O", "O"]], [["O"], ["O", "B-PER", "X-PER"]])


# ============================================================================ parity: sklearn / scipy


def _random_label_pairs(n_trials: int = 30):
    rng = np.random.default_rng(1234)
    for trial in range(n_trials):
        n, k = int(rng.integers(5, 300)), int(rng.integers(2, 5))
        gold = rng.integers(0, k, n)
        flip = rng.random(n) < rng.uniform(0.0, 1.0)
        pred = np.where(flip, rng.integers(0, k, n), gold)
        if trial == 0:
            pred = np.ones(n, dtype=int)  # constant prediction: MCC undefined -> 0
        yield pred, gold


def test_classification_parity_with_sklearn() -> None:
    skm = pytest.importorskip("sklearn.metrics")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for pred, gold in _random_label_pairs():
            assert M.accuracy(pred, gold) == pytest.approx(skm.accuracy_score(gold, pred), abs=1e-12)
            assert M.matthews_corrcoef(pred, gold) == pytest.approx(skm.matthews_corrcoef(gold, pred), abs=1e-12)
            assert M.macro_f1(pred, gold) == pytest.approx(skm.f1_score(gold, pred, average="macro"), abs=1e-12)
            prf = M.precision_recall_f1(pred, gold, positive=1)  # class 1 against all the others
            one = {"labels": [1], "average": "micro"}
            assert prf.precision == pytest.approx(skm.precision_score(gold, pred, **one), abs=1e-12)
            assert prf.recall == pytest.approx(skm.recall_score(gold, pred, **one), abs=1e-12)
            assert prf.f1 == pytest.approx(skm.f1_score(gold, pred, **one), abs=1e-12)
            pb, gb = (pred > 0).astype(int), (gold > 0).astype(int)  # the binary case proper
            assert M.f1_binary(pb, gb) == pytest.approx(skm.f1_score(gb, pb), abs=1e-12)
            assert M.matthews_corrcoef(pb, gb) == pytest.approx(skm.matthews_corrcoef(gb, pb), abs=1e-12)


def test_correlation_parity_with_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(99)
    for trial in range(30):
        n = int(rng.integers(3, 200))
        if trial % 2:  # many ties: STS-B-like scores on a coarse grid
            x, y = rng.integers(0, 6, n) / 1.0, rng.integers(0, 11, n) / 2.0
        else:
            x = rng.normal(size=n)
            y = 0.5 * x + rng.normal(size=n)
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        assert M.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
        assert M.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
        assert np.allclose(M.average_ranks(y), stats.rankdata(y))


# ============================================================================ entity spans: by hand


def _spans(tags: list[str], scheme: str = "BIO") -> list[tuple[str, int, int]]:
    return [tuple(s) for s in M.entity_spans(tags, scheme)]


def test_entity_spans_conlleval_corner_cases() -> None:
    assert _spans(["O", "I-PER", "I-PER", "O"]) == [("PER", 1, 3)]  # I after O starts an entity
    assert _spans(["B-PER", "I-LOC"]) == [("PER", 0, 1), ("LOC", 1, 2)]  # I-Y after B-X: new Y
    assert _spans(["I-PER", "B-PER", "I-PER"]) == [("PER", 0, 1), ("PER", 1, 3)]
    assert _spans(["B-PER", "B-PER", "O", "B-LOC"]) == [("PER", 0, 1), ("PER", 1, 2), ("LOC", 3, 4)]
    assert _spans(["I-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 1), ("LOC", 1, 3)]
    assert _spans(["B-ORG-X", "I-ORG-X"]) == [("ORG-X", 0, 2)]  # the type may contain '-'
    assert _spans(["O", "O"]) == [] and _spans([]) == []
    assert _spans(["I-MISC"]) == [("MISC", 0, 1)]  # closed by the end of the sentence


def test_entity_spans_iobes() -> None:
    tags = ["S-PER", "B-LOC", "E-LOC", "E-LOC", "I-ORG", "O", "E-MISC", "B-PER", "I-PER", "E-PER"]
    assert _spans(tags, "IOBES") == [
        ("PER", 0, 1), ("LOC", 1, 3), ("LOC", 3, 4), ("ORG", 4, 5), ("MISC", 6, 7), ("PER", 7, 10),
    ]


def test_entity_f1_by_hand() -> None:
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "I-ORG"]]
    report = M.entity_f1(pred, gold)  # gold 3, pred 3, correct 1 (the PER)
    assert report["precision"] == pytest.approx(1 / 3) and report["recall"] == pytest.approx(1 / 3)
    assert report["f1"] == pytest.approx(1 / 3) and report["support"] == 3
    assert report["per_type"]["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}
    assert report["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert report["per_type"]["ORG"]["precision"] == 0.0 and report["per_type"]["ORG"]["support"] == 1
    flat = M.compute("entity_f1", pred, gold)
    assert flat["f1"] == pytest.approx(1 / 3) and flat["f1_PER"] == 1.0 and flat["f1_LOC"] == 0.0


def test_entity_spans_parity_with_seqeval_on_random_tag_soup() -> None:
    """Random (mostly ill-formed) sequences: every span equals seqeval's get_entities."""
    seqeval_labeling = pytest.importorskip("seqeval.metrics.sequence_labeling")
    rng = random.Random(5)
    tag_sets = {"BIO": ["O", "B-A", "I-A", "B-B", "I-B"],
                "IOBES": ["O"] + [f"{p}-{t}" for t in "AB" for p in "BIES"]}
    for scheme, tag_set in tag_sets.items():
        for _ in range(3000):
            tags = [rng.choice(tag_set) for _ in range(rng.randint(1, 8))]
            expected = [(t, s, e + 1) for t, s, e in seqeval_labeling.get_entities(tags)]
            assert _spans(tags, scheme) == expected, tags


# ============================================================================ entity F1: CoNLL-2003 vs seqeval


def _read_conll_tags(path: Path) -> list[list[str]]:
    """NER tags (last column) per sentence; -DOCSTART- lines are skipped wherever they appear."""
    sentences, current = [], []
    for line in path.read_text(encoding="utf-8").split("\n"):
        fields = line.split()
        if fields and fields[0] == "-DOCSTART-":
            continue
        if not fields:
            if current:
                sentences.append(current)
            current = []
            continue
        current.append(fields[-1])
    if current:
        sentences.append(current)
    return sentences


def _retag_entity_starts(tags: list[str], old: str, new: str) -> list[str]:
    """Rewrite prefix ``old`` as ``new`` on every tag that begins an entity (after O, or after a tag
    of another type). ``I-`` -> ``B-`` turns IOB1 into BIO; ``B-`` -> ``I-`` turns BIO into IOB1."""
    out = []
    for i, tag in enumerate(tags):
        prev = tags[i - 1] if i else "O"
        if tag.startswith(old) and (prev == "O" or prev[2:] != tag[2:]):
            tag = new + tag[2:]
        out.append(tag)
    return out


def _iob1_to_bio(tags: list[str]) -> list[str]:
    return _retag_entity_starts(tags, "I-", "B-")


def _bio_to_iob1(tags: list[str]) -> list[str]:
    return _retag_entity_starts(tags, "B-", "I-")


def _bio_to_iobes(tags: list[str]) -> list[str]:
    out = []
    for i, tag in enumerate(tags):
        nxt = tags[i + 1] if i + 1 < len(tags) else "O"
        continues = nxt.startswith("I-") and nxt[2:] == tag[2:]
        if tag.startswith("B-") and not continues:
            tag = "S-" + tag[2:]
        elif tag.startswith("I-") and not continues:
            tag = "E-" + tag[2:]
        out.append(tag)
    return out


@pytest.fixture(scope="module")
def testb() -> dict[str, list[list[str]]]:
    iob1 = _read_conll_tags(_shared_file("conll2003/eng.testb"))
    return {"iob1": iob1, "bio": [_iob1_to_bio(s) for s in iob1]}


def _gold_entities(tags: list[str]) -> list[tuple[str, int, int]]:
    """Spans of a *valid* BIO sequence, read directly (B starts, I continues)."""
    spans = []
    for i, tag in enumerate(tags):
        if tag.startswith("B-"):
            spans.append([tag[2:], i, i + 1])
        elif tag.startswith("I-"):
            spans[-1][2] = i + 1
    return [tuple(s) for s in spans]


def _corrupt(seqs, rate: float, tag_set: list[str], seed: int):
    rng = random.Random(seed)
    return [[rng.choice(tag_set) if rng.random() < rate else t for t in s] for s in seqs]


def _type_swap(seqs, seed: int):
    rng = random.Random(seed)
    out = []
    for tags in seqs:
        new = list(tags)
        for type_, start, end in _gold_entities(tags):
            if rng.random() < 0.3:
                other = rng.choice([t for t in TYPES if t != type_])
                new[start:end] = ["B-" + other] + ["I-" + other] * (end - start - 1)
        out.append(new)
    return out


def _boundary_shift(seqs, seed: int):
    rng = random.Random(seed)
    out = []
    for tags in seqs:
        new = list(tags)
        for type_, start, end in _gold_entities(tags):
            move = rng.choice(["keep", "grow_left", "grow_right", "shrink_left", "shrink_right"])
            if move == "grow_left" and start > 0 and new[start - 1] == "O":
                new[start - 1], new[start] = "B-" + type_, "I-" + type_
            elif move == "grow_right" and end < len(new) and new[end] == "O":
                new[end] = "I-" + type_
            elif move == "shrink_left" and end - start > 1:
                new[start], new[start + 1] = "O", "B-" + type_
            elif move == "shrink_right" and end - start > 1:
                new[end - 1] = "O"
        out.append(new)
    return out


def _invalid_inside(seqs, seed: int):
    """I-X after O (B-X written as I-X, stray I-Y in O), and I-Y right after B-X."""
    rng = random.Random(seed)
    out = []
    for tags in seqs:
        new = []
        for i, tag in enumerate(tags):
            r = rng.random()
            if tag.startswith("B-") and r < 0.5:
                tag = "I-" + tag[2:]
            elif tag == "O" and r < 0.05:
                tag = "I-" + rng.choice(TYPES)
            elif tag.startswith("I-") and i and tags[i - 1].startswith("B-") and r < 0.3:
                tag = "I-" + rng.choice([t for t in TYPES if t != tag[2:]])
            new.append(tag)
        out.append(new)
    return out


def _assert_matches_seqeval(gold, pred, scheme: str = "BIO") -> dict:
    seqeval_labeling = pytest.importorskip("seqeval.metrics.sequence_labeling")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = seqeval_labeling.classification_report(gold, pred, output_dict=True, digits=10)
    ours = M.entity_f1(pred, gold, scheme=scheme)
    micro = expected["micro avg"]
    assert ours["precision"] == pytest.approx(micro["precision"], abs=1e-9)
    assert ours["recall"] == pytest.approx(micro["recall"], abs=1e-9)
    assert ours["f1"] == pytest.approx(micro["f1-score"], abs=1e-9)
    assert ours["support"] == micro["support"]
    types = {k for k in expected if not k.endswith(" avg")}
    assert set(ours["per_type"]) == types
    for type_ in types:
        for key, seqeval_key in (("precision", "precision"), ("recall", "recall"), ("f1", "f1-score")):
            assert ours["per_type"][type_][key] == pytest.approx(expected[type_][seqeval_key], abs=1e-9)
        assert ours["per_type"][type_]["support"] == expected[type_]["support"]
    return ours


def test_conll_testb_loader_and_gold_entity_counts(testb) -> None:
    assert len(testb["iob1"]) == 3453 and sum(map(len, testb["iob1"])) == 46435
    report = M.entity_f1(testb["bio"], testb["bio"])
    assert report["f1"] == 1.0 and report["support"] == 5648  # the published CoNLL-2003 test figures
    assert {t: s["support"] for t, s in report["per_type"].items()} == {
        "LOC": 1668, "MISC": 702, "ORG": 1661, "PER": 1617,
    }


PREDICTIONS = {
    "corrupt_5pct": lambda g: _corrupt(g, 0.05, BIO_TAGS, seed=1),
    "corrupt_20pct": lambda g: _corrupt(g, 0.20, BIO_TAGS, seed=2),
    "type_swap": lambda g: _type_swap(g, seed=3),
    "boundary_shift": lambda g: _boundary_shift(g, seed=4),
    "invalid_inside": lambda g: _invalid_inside(g, seed=5),
    "all_o": lambda g: [["O"] * len(s) for s in g],
}


@pytest.mark.parametrize("kind", list(PREDICTIONS))
def test_entity_f1_parity_with_seqeval_on_conll_testb(testb, kind: str) -> None:
    gold = testb["bio"]
    pred = PREDICTIONS[kind](gold)
    ours = _assert_matches_seqeval(gold, pred)
    if kind != "all_o":
        assert 0.0 < ours["f1"] < 1.0  # the corruption really did something
    # IOB1 input mode gives the same as converting to BIO first (raw gold straight from the file)
    assert M.entity_f1([_bio_to_iob1(s) for s in pred], testb["iob1"], scheme="IOB1") == ours


def test_entity_f1_parity_with_seqeval_iobes(testb) -> None:
    gold = [_bio_to_iobes(s) for s in testb["bio"]]
    assert M.entity_f1(gold, gold, scheme="IOBES")["support"] == 5648
    for seed, rate in ((6, 0.05), (7, 0.2)):
        _assert_matches_seqeval(gold, _corrupt(gold, rate, IOBES_TAGS, seed), scheme="IOBES")


# ============================================================================ SQuAD: by hand


@pytest.mark.parametrize(
    "raw, normalized",
    [
        ("The Quick, brown fox!", "quick brown fox"),
        ("an apple a day", "apple day"),
        ("Theatre anatomy Annex", "theatre anatomy annex"),  # articles only as whole words
        ("a.b the-end", "ab theend"),  # punctuation goes first, so these are no longer articles
        ("\tNew\n York  ", "new york"),
        ("café—the end", "café— end"),  # '—' is not ASCII punctuation but is a word boundary
        ("THE", ""),
        ("", ""),
    ],
)
def test_normalize_answer(raw: str, normalized: str) -> None:
    assert M.normalize_answer(raw) == normalized


def test_squad_em_and_f1_by_hand() -> None:
    assert M.squad_exact_match("Broncos", ["Denver Broncos", "the Broncos."]) == 1.0
    assert M.squad_exact_match("Denver", ["Denver Broncos"]) == 0.0
    # common 2 of 3 tokens either way: P = R = 2/3
    assert M.squad_f1("Denver Broncos team", ["Broncos of Denver"]) == pytest.approx(2 / 3)
    assert M.squad_f1("Denver", ["Denver Broncos", "Denver"]) == 1.0  # the best gold counts
    assert M.squad_f1("the the cat cat", ["cat"]) == pytest.approx(2 / 3)  # multiset: P 1/2, R 1
    assert M.squad_exact_match("", ["Denver"]) == 0.0 and M.squad_f1("", ["Denver"]) == 0.0
    # the official quirk: an empty prediction against an answer that normalises to "" is EM 1, F1 0
    assert M.squad_exact_match("", ["The"]) == 1.0 and M.squad_f1("", ["The"]) == 0.0


def test_squad_scores_missing_predictions_count_as_zero() -> None:
    answers = {"q1": ["Denver Broncos"], "q2": ["Paris"], "q3": ["blue"], "q4": ["x y"]}
    preds = {"q1": "Broncos", "q2": "paris", "q4": "y", "unknown": "ignored"}
    # q1: EM 0, F1 2/3; q2: EM 1, F1 1; q3: missing; q4: EM 0, F1 2/3
    scores = M.squad_scores_from_answers(preds, answers)
    assert scores["exact_match"] == pytest.approx(1 / 4)  # fractions, as every metric of muppets
    assert scores["f1"] == pytest.approx((2 / 3 + 1 + 2 / 3) / 4)
    assert M.compute("squad", preds, answers) == scores


def test_every_metric_scores_a_perfect_prediction_as_one() -> None:
    """One unit for every score, the fraction the summaries print: a perfect prediction is 1.0
    under every metric, SQuAD's and CMRC's EM and F1 included (their official scripts print 100)."""
    golds = {"accuracy": [0, 1, 1, 0], "f1": [0, 1, 1, 0], "mcc": [0, 1, 1, 0],
             "pearson_spearman": [0.1, 0.5, 0.3, 0.9], "entity_f1": [["B-PER", "O"], ["O", "B-LOC", "I-LOC"]],
             "token_accuracy": [["DT", "NN"], ["VB"]], "squad": {"q1": ["Denver Broncos"], "q2": ["Paris"]},
             "cmrc2018": {"q": ["北京大学"]}}
    assert set(golds) == set(M.METRIC_NAMES)
    for name, gold in golds.items():
        pred = {q: answers[0] for q, answers in gold.items()} if isinstance(gold, dict) else gold
        scores = M.compute(name, pred, gold)
        assert scores and all(v == pytest.approx(1.0) for v in scores.values()), (name, scores)


# ============================================================================ SQuAD: real dev set


def _reference_normalize(text: str) -> str:
    """The published v1.1 normalisation, spelled out step by step (independent of muppets)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _reference_scores(dataset: dict, predictions: dict[str, str]) -> tuple[float, float]:
    """The published v1.1 evaluation loop, written out from the dataset json (in percent, as it prints)."""
    total = em_sum = f1_sum = 0.0
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    continue
                pred = _reference_normalize(predictions[qa["id"]])
                golds = [_reference_normalize(a["text"]) for a in qa["answers"]]
                em_sum += max(float(pred == g) for g in golds)
                f1_sum += max(_reference_token_f1(pred.split(), g.split()) for g in golds)
    return 100.0 * em_sum / total, 100.0 * f1_sum / total


def _reference_token_f1(pred: list[str], gold: list[str]) -> float:
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    p, r = same / len(pred), same / len(gold)
    return 2 * p * r / (p + r)


@pytest.fixture(scope="module")
def squad_dev() -> dict:
    return json.loads(_shared_file("squad/dev-v1.1.json").read_text(encoding="utf-8"))


def _first_answers(dataset: dict) -> dict[str, str]:
    return {qa["id"]: qa["answers"][0]["text"]
            for article in dataset["data"] for p in article["paragraphs"] for qa in p["qas"]}


def test_squad_dev_gold_answers(squad_dev) -> None:
    answers = M.squad_gold_answers(squad_dev)
    assert len(answers) == 10570 and sum(map(len, answers.values())) == 34726
    assert M.squad_scores(_first_answers(squad_dev), squad_dev) == {"exact_match": 1.0, "f1": 1.0}
    # empty predictions: F1 0, but EM is not quite 0 — three questions list "." among their gold
    # answers, which normalises to "" and so exactly matches "" (the official script agrees)
    empty_golds = [qid for qid, golds in answers.items() if "." in golds]
    assert len(empty_golds) == 3
    empty = M.squad_scores({qid: "" for qid in answers}, squad_dev)
    assert empty == {"exact_match": pytest.approx(3 / 10570, abs=1e-12), "f1": 0.0}
    assert 100 * empty["exact_match"] == pytest.approx(_reference_scores(squad_dev, {q: "" for q in answers})[0])
    # decorations the normalisation removes: a leading article, trailing punctuation, extra spaces
    decorated = {qid: f"  The {text}  . " for qid, text in _first_answers(squad_dev).items()}
    assert M.compute("squad", decorated, squad_dev) == {"exact_match": 1.0, "f1": 1.0}


def _drop_last_token(text: str) -> str:
    return " ".join(text.split()[:-1])


def test_squad_dev_perturbed_predictions_match_the_reference_loop(squad_dev) -> None:
    first = _first_answers(squad_dev)
    qids = list(first)
    perturbations = {
        "drop_last_token": {qid: _drop_last_token(text) for qid, text in first.items()},
        "neighbour_answer": {qid: first[qids[i - 1]] for i, qid in enumerate(qids)},
        "every_third_missing": {qid: text for i, (qid, text) in enumerate(first.items()) if i % 3},
    }
    for name, preds in perturbations.items():
        em, f1 = _reference_scores(squad_dev, preds)
        scores = M.squad_scores(preds, squad_dev)
        assert 100 * scores["exact_match"] == pytest.approx(em, abs=1e-9), name  # the script prints percent
        assert 100 * scores["f1"] == pytest.approx(f1, abs=1e-9), name
        if name == "every_third_missing":  # the unanswered third scores 0 but still counts
            assert scores == pytest.approx({"exact_match": len(preds) / 10570,
                                            "f1": len(preds) / 10570}, abs=1e-11)
        else:
            assert 0.0 < scores["exact_match"] < scores["f1"] < 1.0, name
    # pinned once both loops agreed: guards the reference loop itself against drifting with the code
    assert M.squad_scores(perturbations["drop_last_token"], squad_dev) == pytest.approx(
        {"exact_match": 0.04418164616840113, "f1": 0.5227553242578205}, abs=1e-11)


# ============================================================================ dispatcher


def test_compute_dispatches_every_metric() -> None:
    assert set(M.METRIC_NAMES) == {"accuracy", "f1", "mcc", "pearson_spearman", "entity_f1",
                                   "token_accuracy", "squad", "cmrc2018"}
    assert M.compute("accuracy", [1, 0], [1, 1]) == {"accuracy": 0.5}
    assert M.compute("token_accuracy", [["a", "b"], ["c"]], [["a", "x"], ["c"]]) == {"accuracy": 2 / 3}
    with pytest.raises(DataError, match="sentence 0"):
        M.compute("token_accuracy", [["a"]], [["a", "b"]])
    f1 = M.compute("f1", [1, 1, 0, 0], [1, 0, 1, 0])
    assert f1 == {"accuracy": 0.5, "precision": 0.5, "recall": 0.5, "f1": 0.5}
    assert M.compute("f1", ["y", "n"], ["y", "y"], positive="y")["f1"] == pytest.approx(2 / 3)
    assert M.compute("mcc", *_from_table(3, 2, 1, 4))["mcc"] == pytest.approx(10 / math.sqrt(600))
    corr = M.compute("pearson_spearman", [1, 2, 3, 4], [2, 1, 4, 3])
    assert corr["pearson"] == pytest.approx(0.6) and corr["corr"] == pytest.approx((0.6 + 0.6) / 2)
    iobes = M.compute("entity_f1", [["S-PER"]], [["S-PER"]], scheme="IOBES")
    assert iobes == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "f1_PER": 1.0}
    assert all(isinstance(v, float) for v in iobes.values())
