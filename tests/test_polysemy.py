"""Polysemy: the shipped sense-labelled set is well formed; the scores by hand (ties count as
chance); static vectors give one point and chance-level sense accuracy while a transparent
contextual model (the mean of the context words' vectors) separates the senses on the set;
occurrences collected from a corpus; 2-means; the ``muppets polysemy`` command."""

from __future__ import annotations

import doctest
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from muppets.analysis import polysemy
from muppets.analysis.polysemy import (collect_occurrences, describe_word, load_sense_set, score_sense_set,
                                       sense_scores, two_means)
from muppets.cli import main
from muppets.errors import DataError
from muppets.transfer.embedders import Embedder, load_embedder
from muppets.vectors import WordVectors

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny_backbones import tiny_elmo, tiny_vectors  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


class ContextMean(Embedder):
    """A transparent contextual model: a word's vector is the mean of the OTHER words' random
    vectors in its sentence (layer 1), next to its own vector (layer 0, static)."""

    kind = "toy"

    def __init__(self, dim: int = 64) -> None:
        super().__init__(Path("context-mean"), 2, dim)
        self.rng, self.table = np.random.default_rng(0), {}

    def vector(self, word: str) -> np.ndarray:
        if word.lower() not in self.table:
            self.table[word.lower()] = self.rng.normal(size=self.dim).astype(np.float32)
        return self.table[word.lower()]

    def embed_batch(self, sentences: Sequence[Sequence[str]], layers: Sequence[int]) -> list[np.ndarray]:
        out = []
        for words in sentences:
            own = np.stack([self.vector(w) for w in words])  # (n, d)
            context = (own.sum(0, keepdims=True) - own) / max(len(words) - 1, 1)
            out.append(np.stack([own, context])[list(layers)])
        return out


def test_the_shipped_set_is_well_formed():
    occurrences = load_sense_set()
    words = Counter(o.word for o in occurrences)
    senses = Counter((o.word, o.sense) for o in occurrences)
    assert len(words) >= 8 and {"bank", "apple", "bat", "plant", "spring", "crane", "bass", "match"} <= set(words)
    assert all(n >= 10 for n in senses.values())
    assert all(len({s for w, s in senses if w == word}) == 2 for word in words)
    assert len({" ".join(o.words) for o in occurrences}) == len(occurrences)  # no sentence twice
    for o in occurrences:
        assert o.words[o.index] == o.word and [w.lower() for w in o.words].count(o.word) == 1


def test_sense_file_errors_name_the_line(tmp_path):
    bad = tmp_path / "s.tsv"
    bad.write_text("word\tsense\tsentence\nbank\triver\tThe bank was muddy.\nbank\tmoney\tNo such word here.\n")
    with pytest.raises(DataError, match=r"s\.tsv:3: the sentence does not contain 'bank'"):
        load_sense_set(bad)
    bad.write_text("w\ts\n")
    with pytest.raises(DataError, match=r"s\.tsv:1: the first line must be the header"):
        load_sense_set(bad)
    bad.write_text("word\tsense\tsentence\nbank\tonly two fields\n")
    with pytest.raises(DataError, match=r"s\.tsv:2: expected word<TAB>sense<TAB>sentence"):
        load_sense_set(bad)


def test_scores_by_hand_ties_count_as_chance():
    one_point = np.ones((6, 3))
    s = sense_scores(one_point, ["a"] * 3 + ["b"] * 3)
    assert s["nn_accuracy"] == pytest.approx(2 / 5)  # (n_s - 1) / (n - 1): a uniform pick among 5 ties
    assert s["separation"] == pytest.approx(1.0) and s["distinct_points"] == 1 and s["gap"] == pytest.approx(0)
    apart = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.2, 0.9]])
    s = sense_scores(apart, ["a", "a", "b", "b"])
    cos = lambda u, v: u @ v / np.linalg.norm(u) / np.linalg.norm(v)  # noqa: E731
    within = (cos(apart[0], apart[1]) + cos(apart[2], apart[3])) / 2
    between = np.mean([cos(apart[i], apart[j]) for i in (0, 1) for j in (2, 3)])
    assert s["nn_accuracy"] == 1.0 and s["separation"] == pytest.approx(within / between)
    assert doctest.testmod(polysemy).failed == 0


def test_static_is_one_point_and_context_separates_senses_on_the_set(tmp_path):
    occurrences = load_sense_set()
    words = sorted({w.lower() for o in occurrences for w in o.words})
    rng = np.random.default_rng(0)
    vectors = WordVectors(words, rng.normal(size=(len(words), 16)).astype(np.float32))
    static = score_sense_set(load_embedder(vectors.save(tmp_path / "all.bin")))
    overall = static["overall"]["0"]
    assert overall["distinct_points"] == 1 and overall["separation"] == pytest.approx(1.0)
    assert overall["nn_accuracy"] == pytest.approx(9 / 19)  # chance with 10 + 10 uses, one left out
    contextual = score_sense_set(ContextMean())
    assert contextual["overall"]["0"]["distinct_points"] == 1  # its layer 0 is static too
    ctx = contextual["overall"]["1"]
    # random word vectors carry no meaning: only shared context words ("river", "water" …) help,
    # which is enough to beat chance and to pull same-sense uses slightly closer
    assert ctx["distinct_points"] == 20 and ctx["nn_accuracy"] > overall["nn_accuracy"] + 0.1
    assert ctx["separation"] > 1.0 and ctx["gap"] > 0
    assert set(contextual["words"]) == {o.word for o in occurrences}


def test_static_oov_words_are_reported_not_scored(tmp_path):
    result = score_sense_set(load_embedder(tiny_vectors(tmp_path / "v.txt")))  # knows "bank" and "apple"
    assert set(result["words"]) == {"apple", "bank"} and "crane" in result["oov"]


def test_collect_occurrences_from_a_corpus_and_two_means(tmp_path):
    corpus = tmp_path / "books"
    corpus.mkdir()
    (corpus / "a.txt").write_text("The Bank raised rates. We sat on the river bank and talked.\n\n"
                                  "No match here. Another bank story! Banks are not counted.\n")
    found = collect_occurrences("bank", [corpus])
    assert [o.context for o in found] == ["The [bank] raised rates .", "We sat on the river [bank] and talked .",
                                          "Another [bank] story !"]
    assert found[0].source.endswith("a.txt:1") and len(collect_occurrences("bank", [corpus], limit=2)) == 2
    pts = np.array([[1.0, 0.0], [0.95, 0.05], [0.0, 1.0], [0.1, 0.9], [0.9, 0.2]])
    groups = two_means(pts)
    assert groups[0] == groups[1] == groups[4] != groups[2] == groups[3]
    assert two_means(np.ones((4, 3))).tolist() == [0, 0, 0, 0]
    rows = describe_word(ContextMean(), found)
    assert rows[0]["distinct_points"] == 1 and rows[1]["distinct_points"] == 3 and "scores" not in rows[0]


def test_cli_polysemy_word_and_whole_set(tmp_path, capsys):
    elmo = tiny_elmo(tmp_path / "elmo")
    assert main(["polysemy", "crane", "--model", str(elmo)]) == 0
    printed = capsys.readouterr().out
    assert "crane: 20 occurrences" in printed and "layer 0: 1 distinct points" in printed
    assert "layer 2: 20 distinct points" in printed and "group 1" in printed
    out = tmp_path / "scores.json"
    assert main(["polysemy", "--model", str(elmo), "--layers", "0,-1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["layers"] == [0, 2] and len(result["words"]) == 8
    assert result["overall"]["0"]["separation"] == pytest.approx(1.0)
    assert main(["polysemy", "zebra", "--model", str(elmo)]) == 2
    assert "occurs 0 times in the sense set" in capsys.readouterr().err
