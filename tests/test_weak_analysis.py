"""LF summary: hand-computed values, parity with Snorkel 0.10's LFAnalysis.lf_summary (the
test oracle), the table and the PNG."""

from __future__ import annotations

import numpy as np
import pytest

from muppets.errors import ConfigError
from muppets.weak import lf_summary, plot_lf_summary

L = np.array([[0, -1, 1], [0, 0, -1], [1, 1, -1], [-1, -1, -1], [1, 0, 0]])
Y = np.array([0, 0, 1, 1, 1])


def test_summary_by_hand() -> None:
    s = lf_summary(L, Y, ["a", "b", "c"])
    assert s.polarity == [[0, 1], [0, 1], [0, 1]]
    assert s.coverage.tolist() == [0.8, 0.6, 0.4]
    assert s.overlaps.tolist() == [0.8, 0.6, 0.4]
    assert s.conflicts.tolist() == [0.4, 0.2, 0.4]  # rows 0 and 4 hold two different votes
    assert s.correct.tolist() == [4, 2, 0] and s.incorrect.tolist() == [0, 1, 2]
    assert s.emp_accuracy == pytest.approx([1.0, 2 / 3, 0.0])


def test_unknown_gold_counts_against_emp_accuracy_as_in_snorkel() -> None:
    s = lf_summary(L, np.array([0, -1, 1, 1, 1]))
    assert s.correct[0] == 3 and s.incorrect[0] == 0
    assert s.emp_accuracy[0] == pytest.approx(0.5 * ((3 - 1) / 4 + 1))


def test_lf_that_never_votes() -> None:
    s = lf_summary(np.array([[-1, 1], [-1, 0]]), np.array([1, 0]))
    assert s.polarity[0] == [] and s.coverage[0] == 0 and s.emp_accuracy[0] == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_identical_to_snorkel_lf_summary(seed) -> None:
    LFAnalysis = pytest.importorskip("snorkel.labeling").LFAnalysis
    rng = np.random.default_rng(seed)
    n, m, k = 300, 6, 3
    matrix = np.where(rng.random((n, m)) < 0.5, rng.integers(0, k, (n, m)), -1)
    matrix[:, 5] = np.where(rng.random(n) < 0.2, 2, -1)  # one unipolar LF
    gold = rng.integers(-1, k, n)
    theirs = LFAnalysis(matrix).lf_summary(gold)
    ours = lf_summary(matrix, gold)
    assert [list(map(int, p)) for p in theirs["Polarity"]] == ours.polarity
    for column, values in [("Coverage", ours.coverage), ("Overlaps", ours.overlaps),
                           ("Conflicts", ours.conflicts), ("Correct", ours.correct),
                           ("Incorrect", ours.incorrect), ("Emp. Acc.", ours.emp_accuracy)]:
        assert np.array_equal(theirs[column].to_numpy(), values), column


def test_table_and_plot(tmp_path) -> None:
    s = lf_summary(L, Y, ["kw_my", "short", "song"])
    table = s.format().splitlines()
    assert table[0].split() == ["lf", "polarity", "coverage", "overlaps", "conflicts", "correct",
                                "incorrect", "emp.acc"]
    assert table[2].split()[:1] == ["kw_my"] and "0.800" in table[2]
    assert s.rows()[1]["emp_accuracy"] == pytest.approx(2 / 3)
    path = plot_lf_summary(s, tmp_path / "out" / "lfs.png", title="toy")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "coverage" not in lf_summary(L).format().split("\n")[2]  # no gold: 5 columns
    assert len(lf_summary(L).format().split("\n")[0].split()) == 5


def test_bad_matrices() -> None:
    with pytest.raises(ConfigError, match=r"entry \[0, 1\] = -3"):
        lf_summary(np.array([[0, -3]]))
    with pytest.raises(ConfigError, match="2-D"):
        lf_summary(np.array([0, 1]))
    with pytest.raises(ConfigError, match="3 gold labels for 5"):
        lf_summary(L, np.array([0, 1, 0]))
    with pytest.raises(ConfigError, match="names"):
        lf_summary(L, names=["a"])
    with pytest.raises(ConfigError, match="no rows"):
        lf_summary(np.zeros((0, 2), dtype=int))


@pytest.mark.parametrize("module", ["lf", "apply", "analysis", "majority", "dawid_skene",
                                    "label_model", "base", "matrix"])
def test_docstring_examples_run(module) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"muppets.weak.{module}"))
    assert result.failed == 0 and result.attempted > 0
