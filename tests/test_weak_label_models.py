"""Label models: hand-written matrices for majority vote (ties, abstains, prior), recovery of
known LF parameters from synthetic conditionally independent LFs, the identifiability guard,
determinism, bad input, and Snorkel 0.10's LabelModel on the same synthetic matrix (oracle).

Tolerances (5,000 rows, 5-6 LFs): every P(outcome | class) within 0.05 for Dawid-Skene (the
MLE) and for the moment-matching LabelModel on symmetric LFs, 0.08 on one-sided (unipolar)
LFs, where second moments carry less information; class balance within 0.06 (0.12 unipolar).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from muppets.errors import ConfigError
from muppets.weak import DawidSkene, LabelModel, MajorityVote, make_label_model
from muppets.weak.base import align_classes
from muppets.weak.label_model import _worse_than_random


def symmetric_lfs(n=5000, seed=0, p1=0.35, K=2, cov=(0.5, 0.4, 0.6, 0.3, 0.5),
                  acc=(0.85, 0.75, 0.7, 0.9, 0.65)):
    """LF j fires with probability cov[j] whatever the class, and is right with acc[j]."""
    rng = np.random.default_rng(seed)
    prior = np.array([1 - p1, p1]) if K == 2 else np.full(K, 1 / K)
    y = rng.choice(K, n, p=prior)
    L = np.full((n, len(cov)), -1)
    theta = np.zeros((len(cov), K, K + 1))
    for j, (c, a) in enumerate(zip(cov, acc)):
        wrong = (y + rng.integers(1, K, n)) % K
        L[:, j] = np.where(rng.random(n) < c, np.where(rng.random(n) < a, y, wrong), -1)
        theta[j, :, 0] = 1 - c
        theta[j, :, 1:] = c * (1 - a) / (K - 1)
        theta[j, np.arange(K), 1 + np.arange(K)] = c * a
    return L, y, theta, prior


def one_sided_lfs(n=5000, seed=0):
    """Spam-like LFs: each votes one class only, firing more often when that class is true."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.5).astype(int)
    specs = [(1, .5, .05), (1, .3, .02), (1, .4, .1), (0, .4, .1), (0, .3, .08), (1, .2, .03)]
    L = np.full((n, len(specs)), -1)
    theta = np.zeros((len(specs), 2, 3))
    for j, (label, hit, false_alarm) in enumerate(specs):
        L[:, j] = np.where(rng.random(n) < np.where(y == label, hit, false_alarm), label, -1)
        theta[j, label, 1 + label], theta[j, 1 - label, 1 + label] = hit, false_alarm
        theta[j, :, 0] = 1 - theta[j, :, 1:].sum(axis=1)
    return L, y, theta, np.array([0.5, 0.5])


# --- majority vote -------------------------------------------------------------------------

def test_majority_vote_probabilities_ties_and_empty_rows() -> None:
    L = np.array([[0, 0, 1], [0, 1, -1], [-1, -1, -1], [2, 2, 1], [1, -1, -1]])
    unfitted = MajorityVote(3)
    assert unfitted.predict_proba(L).tolist() == [
        [1, 0, 0], [.5, .5, 0], [1 / 3, 1 / 3, 1 / 3], [0, 0, 1], [0, 1, 0]]
    assert unfitted.predict(L).tolist() == [0, -1, -1, 2, 1]  # no prior: ties and no vote abstain
    assert unfitted.predict(L, tie_break="abstain").tolist() == [0, -1, -1, 2, 1]
    fitted = MajorityVote(3).fit(np.array([[1, 1], [1, -1], [0, -1], [2, 2]]))
    assert fitted.class_balance_.tolist() == pytest.approx([1 / 3] * 3)  # nothing learned from votes
    assert fitted.predict(L).tolist() == [0, -1, -1, 2, 1]
    assert fitted.score(L, np.array([0, 0, 1, 2, -1])) == 0.5  # unknown gold skipped, abstain wrong
    given = MajorityVote(3, class_balance=[0.2, 0.5, 0.3]).fit(L)
    assert given.predict(L).tolist() == [0, 1, 1, 2, 1]  # ties and the empty row -> the likelier class
    assert given.predict(L, tie_break="abstain").tolist() == [0, -1, 1, 2, 1]
    assert given.predict_proba(L)[2].tolist() == pytest.approx([0.2, 0.5, 0.3])


def imbalanced_one_sided(n=5000, seed=0):
    """Issue 47's matrix: 10% positives; three LFs vote 1 (fire on 60% of positives, 10% of
    negatives), one votes 0 (5% / 1%). Each LF beats random per class, yet the three
    positive LFs vote 1 more often on negatives (0.9 * 0.1 > 0.1 * 0.6)."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.1).astype(int)
    specs = [(1, .6, .1)] * 3 + [(0, .05, .01)]
    L = np.full((n, 4), -1)
    for j, (label, hit, false_alarm) in enumerate(specs):
        L[:, j] = np.where(rng.random(n) < np.where(y == label, hit, false_alarm), label, -1)
    return L, y


def test_imbalanced_one_sided_lfs_are_not_inverted() -> None:
    L, y = imbalanced_one_sided()
    always_negative = float((y == 0).mean())  # 0.895
    ds = DawidSkene(2).fit(L)
    assert ds.score(L, y) > 0.93 and ds.class_balance_[0] > 0.85  # the inverted fit scored 0.063
    assert ds.theta_[0, 1, 2] > 0.5 > 0.2 > ds.theta_[0, 0, 2]  # P(vote 1 | 1) ~0.6, P(vote 1 | 0) ~0.1
    fixed = LabelModel(2, class_balance=[0.9, 0.1]).fit(L)
    assert fixed.class_balance_.tolist() == [0.9, 0.1] and fixed.score(L, y) > 0.93
    given = DawidSkene(2, class_balance=[0.9, 0.1]).fit(L)
    assert given.class_balance_.tolist() == [0.9, 0.1] and given.score(L, y) > 0.93
    assert ds.score(L, y) > always_negative + 0.03
    # learned balance: at least Snorkel's LabelModel on this matrix (0.44, issue 47)
    assert LabelModel(2).fit(L).score(L, y) > 0.6


def test_majority_vote_gives_uncovered_rows_no_class_of_a_biased_prior() -> None:
    L, y = imbalanced_one_sided()
    uncovered = (L == -1).all(axis=1)
    labels = MajorityVote(2).fit(L).predict(L)
    assert (labels[uncovered] == -1).all()  # abstains, as Snorkel's MajorityLabelVoter
    counts = np.stack([(L == k).sum(axis=1) for k in (0, 1)], axis=1)
    decisive = counts.max(axis=1) > counts.min(axis=1)
    assert np.array_equal(labels[decisive], counts[decisive].argmax(axis=1))
    assert (labels[~decisive] == -1).all()  # uncovered and tied rows: no prior to decide with
    given = MajorityVote(2, class_balance=[0.9, 0.1]).fit(L).predict(L)
    assert (given[uncovered] == 0).all()  # the old learned prior gave them all class 1


# --- parameter recovery ----------------------------------------------------------------------

@pytest.mark.parametrize("make, tol_theta, tol_pi", [
    (lambda: DawidSkene(2), 0.05, 0.06), (lambda: LabelModel(2), 0.05, 0.06)])
def test_recovers_symmetric_lfs(make, tol_theta, tol_pi) -> None:
    L, y, theta, prior = symmetric_lfs()
    model = make().fit(L)
    assert np.abs(model.theta_ - theta).max() < tol_theta
    assert np.abs(model.class_balance_ - prior).max() < tol_pi
    assert model.score(L, y) > MajorityVote(2).fit(L).score(L, y)


@pytest.mark.parametrize("make, tol_theta, tol_pi", [
    (lambda: DawidSkene(2), 0.05, 0.06), (lambda: LabelModel(2), 0.08, 0.12)])
def test_recovers_one_sided_lfs(make, tol_theta, tol_pi) -> None:
    L, y, theta, prior = one_sided_lfs()
    model = make().fit(L)
    assert np.abs(model.theta_ - theta).max() < tol_theta
    assert np.abs(model.class_balance_ - prior).max() < tol_pi


def test_three_classes() -> None:
    L, y, theta, _ = symmetric_lfs(K=3, acc=(0.7, 0.6, 0.6, 0.8, 0.55))
    for model in (DawidSkene(3), LabelModel(3)):
        model.fit(L)
        assert np.abs(model.theta_ - theta).max() < 0.05
        assert model.score(L, y) > MajorityVote(3).score(L, y)


def test_abstains_as_evidence_helps_one_sided_independent_lfs() -> None:
    L, y, _, _ = one_sided_lfs()
    assert (LabelModel(2, abstain_evidence=True).fit(L).score(L, y)
            > LabelModel(2).fit(L).score(L, y) + 0.05)


# --- guards, determinism, errors --------------------------------------------------------------

def test_align_classes_undoes_an_inverted_solution() -> None:
    _, _, theta, prior = symmetric_lfs(n=10)
    flipped = theta[:, ::-1, :].copy()
    fixed, balance, perm = align_classes(flipped, prior[::-1].copy())
    assert perm == (1, 0) and np.allclose(fixed, theta) and np.allclose(balance, prior)
    assert align_classes(theta, prior)[2] == (0, 1)


def test_align_classes_reads_class_conditional_rates_not_balance_weighted_ones() -> None:
    # theta[j, y, o] of issue 47's LFs, outcome 0 = abstain, 1 = votes 0, 2 = votes 1
    theta = np.array([[[.9, 0, .1], [.4, 0, .6]]] * 3 + [[[.95, .05, 0], [.99, .01, 0]]])
    balance = np.array([0.9, 0.1])
    # identity: 0.05 + 3 * 0.6 = 1.85 against the renaming's 3 * 0.1 + 0.01 = 0.31; weighted by
    # the balance the renaming won: 0.9 * 0.3 + 0.1 * 0.01 = 0.271 against 0.9 * 0.05 + 0.1 * 1.8 = 0.225
    assert align_classes(theta, balance)[2] == (0, 1)
    renamed, new_balance, perm = align_classes(theta[:, ::-1].copy(), balance[::-1].copy())
    assert perm == (1, 0) and np.allclose(renamed, theta) and new_balance.tolist() == [0.9, 0.1]


def test_a_fixed_class_balance_is_never_reordered() -> None:
    theta = np.array([[[.9, 0, .1], [.4, 0, .6]]] * 3)
    flipped = theta[:, ::-1].copy()
    kept, balance, perm = align_classes(flipped, np.array([0.9, 0.1]), fixed=True)
    assert perm == (0, 1) and balance.tolist() == [0.9, 0.1] and np.array_equal(kept, flipped)
    # a uniform fixed balance is the same under every renaming: the guard still works
    assert align_classes(flipped, np.array([0.5, 0.5]), fixed=True)[2] == (1, 0)


def test_one_sided_lfs_without_a_balance_are_warned_about(caplog) -> None:
    L, _ = imbalanced_one_sided(n=500)
    with caplog.at_level("WARNING", logger="muppets.weak.base"):
        LabelModel(2, class_balance=[0.9, 0.1]).fit(L)
        MajorityVote(2).fit(L)
        DawidSkene(2).fit(symmetric_lfs(n=500)[0])  # two-sided LFs
    assert "one-sided" not in caplog.text
    with caplog.at_level("WARNING", logger="muppets.weak.base"):
        LabelModel(2).fit(L)
        DawidSkene(2).fit(L)
    assert caplog.text.count("one-sided") == 2 and "--class-balance" in caplog.text


def test_no_lf_fitted_worse_than_random() -> None:
    import torch

    L, _, _, _ = one_sided_lfs(seed=3)
    model = LabelModel(2).fit(L)
    assert float(_worse_than_random(torch.from_numpy(model.theta_))) < 1e-6


def one_trick_spam(n=3000, seed=0):
    """Dependent LFs: each spam comment uses one of three tricks, each spam LF detects one
    (so the spam LFs exclude each other given spam); two independent ham LFs."""
    rng = np.random.default_rng(seed)
    y, trick = rng.integers(0, 2, n), rng.integers(0, 3, n)
    L = np.full((n, 5), -1)
    for j in range(3):
        hit = (y == 1) & (trick == j) & (rng.random(n) < 0.8)
        L[:, j] = np.where(hit | ((y == 0) & (rng.random(n) < 0.05)), 1, -1)
    L[:, 3] = np.where(rng.random(n) < np.where(y == 0, 0.4, 0.1), 0, -1)
    L[:, 4] = np.where(rng.random(n) < np.where(y == 0, 0.3, 0.05), 0, -1)
    return L, y


def test_dependence_diagnostic(caplog) -> None:
    L, _, _, _ = symmetric_lfs(seed=2)
    model = LabelModel(2).fit(L)
    assert model.fit_residual_ < 0.08 and "independence" not in caplog.text
    model = LabelModel(2).fit(one_trick_spam()[0])
    assert model.fit_residual_ > 0.3 and "independence model poorly" in caplog.text
    assert set(model.worst_pair_) <= {0, 1, 2}


def test_deterministic_fit() -> None:
    L, _, _, _ = symmetric_lfs(n=2000, seed=5)
    for name in ("majority", "dawid-skene", "snorkel"):
        a = make_label_model(name, 2).fit(L).predict_proba(L)
        b = make_label_model(name, 2).fit(L).predict_proba(L)
        assert np.array_equal(a, b), name


def test_errors() -> None:
    with pytest.raises(ConfigError, match=r"entry \[1, 0\] = 2"):
        LabelModel(2).fit(np.array([[0, 1], [2, -1]]))
    with pytest.raises(ConfigError, match="call fit"):
        DawidSkene(2).predict_proba(np.array([[0, 1]]))
    with pytest.raises(ConfigError, match="fitted on 2 LFs"):
        DawidSkene(2).fit(np.array([[0, 1], [1, 1]])).predict(np.array([[0, 1, 1]]))
    for name in ("majority", "dawid-skene", "snorkel"):
        with pytest.raises(ConfigError, match="class_balance"):
            make_label_model(name, 2, class_balance=np.array([0.2, 0.2]))
    for name in ("majority", "dawid-skene", "snorkel"):
        with pytest.raises(ConfigError, match="empty label matrix"):
            make_label_model(name, 2).fit(np.zeros((0, 3), dtype=int))
    with pytest.raises(ConfigError, match="unknown label model"):
        make_label_model("snorkle", 2)
    with pytest.raises(ConfigError, match="tie_break"):
        MajorityVote(2).predict(np.array([[0]]), tie_break="random")


# --- Snorkel as the oracle ---------------------------------------------------------------------

def test_at_least_as_good_as_snorkel_label_model_on_synthetic_lfs() -> None:
    snorkel_model = pytest.importorskip("snorkel.labeling.model")
    L, y, _, _ = symmetric_lfs(p1=0.5, seed=1)
    theirs = snorkel_model.LabelModel(cardinality=2, verbose=False)
    theirs.fit(L, n_epochs=500, seed=123, progress_bar=False)
    their_acc = float((theirs.predict(L, tie_break_policy="random") == y).mean())
    assert LabelModel(2).fit(L).score(L, y) >= their_acc - 0.005


def test_majority_vote_equals_snorkels_majority_label_voter_without_a_balance() -> None:
    snorkel_model = pytest.importorskip("snorkel.labeling.model")
    for L in (imbalanced_one_sided(n=2000)[0], one_trick_spam(n=2000)[0], symmetric_lfs(n=2000, K=3)[0]):
        K = int(L.max()) + 1
        theirs = snorkel_model.MajorityLabelVoter(cardinality=K).predict(L, tie_break_policy="abstain")
        ours = MajorityVote(K).fit(L).predict(L)
        assert ((ours == -1) == (theirs == -1)).all() and np.array_equal(ours, theirs)


# --- issue 51: LF names in every message; an accurate LF the fit makes count for nothing -----------

def test_every_label_model_message_names_lfs_by_name(caplog) -> None:
    L, _ = one_trick_spam()
    names = ["kw_check", "kw_subscribe", "kw_http", "kw_song", "short"]
    for model in (LabelModel(2), DawidSkene(2), MajorityVote(2)):
        caplog.clear()
        with caplog.at_level("WARNING"):
            model.fit(L, names)
        assert model.lf_names_ == names
        assert not re.search(r"\bLFs? \d", caplog.text), caplog.text
        assert isinstance(model, MajorityVote) or "largest misfit" not in caplog.text or "misfit: kw_" in caplog.text
    with caplog.at_level("WARNING"):
        LabelModel(2).fit(L, names)
    assert re.search(r"largest misfit: (kw_\w+|short) and (kw_\w+|short)\)", caplog.text)
    caplog.clear()
    with caplog.at_level("WARNING"):
        LabelModel(2).fit(L)  # no names given: "LF 2", never a bare index
    assert re.search(r"largest misfit: LF \d and LF \d\)", caplog.text)
    with pytest.raises(ConfigError, match="3 LF names for 5"):
        LabelModel(2).fit(L, names[:3])


def http_like(n=4000, seed=1):
    """The spam tutorial's keyword_http in miniature: three precise spam LFs, one trick per spam
    comment (they never vote together), and the third's comments are mostly short, so the ham LF
    ``short`` votes with it; a second ham LF is independent."""
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.5
    trick = rng.integers(0, 3, n)
    L = np.full((n, 5), -1)
    for j in range(3):
        L[:, j] = np.where(y & (trick == j) & (rng.random(n) < 0.9), 1, -1)
    L[:, 3] = np.where((~y & (rng.random(n) < 0.3)) | (y & (trick == 2) & (rng.random(n) < 0.8)), 0, -1)
    L[:, 4] = np.where(~y & (rng.random(n) < 0.3), 0, -1)
    return L, y.astype(int)


def test_an_accurate_lf_whose_co_votes_contradict_independence_is_named(caplog) -> None:
    L, y = http_like()
    names = ["check_out", "subscribe", "http", "short", "song"]
    with caplog.at_level("WARNING"):
        model = LabelModel(2).fit(L, names)
    assert (L[:, 2] == 1).any() and (y[L[:, 2] == 1] == 1).all()  # http: never wrong
    assert (2, 1) in model.no_evidence_  # ... yet its vote counts for (next to) nothing
    assert "http's votes for class 1 count" in caplog.text and "with short" in caplog.text
    only_http = ((L != -1).sum(axis=1) == 1) & (L[:, 2] == 1)
    probs = model.predict_proba(L)
    assert abs(probs[only_http, 1].mean() - probs[(L == -1).all(axis=1), 1].mean()) < 0.05  # the puzzle
    assert (MajorityVote(2).fit(L).predict(L)[only_http] == 1).all()  # majority vote counts the vote
    rng = np.random.default_rng(2)
    independent = np.where(rng.random((len(y), 3)) < 0.4, np.where(y[:, None] == 1, 1, -1), -1)
    assert LabelModel(2).fit(np.c_[independent, L[:, 4]]).no_evidence_ == []  # accurate, independent: fine


def test_no_evidence_by_hand() -> None:
    from muppets.weak.base import no_evidence

    theta = np.zeros((3, 2, 3))
    theta[:, :, 0] = 0.5
    theta[0, :, 2] = [0.1, 0.4]  # votes 1: 4x likelier under 1 -> evidence
    theta[1, :, 2] = [0.4, 0.42]  # votes 1: 1.05x -> below the floor of 1.1
    theta[2, :, 1] = [0.1, 0.3]  # votes 0, likelier under 1 -> counts against 0
    L = np.array([[1, 1, 0], [-1, -1, -1]])
    assert no_evidence(theta, L) == [(1, 1), (2, 0)]
    assert no_evidence(theta, L, floor=1.0) == [(2, 0)]
    assert no_evidence(theta, np.array([[1, -1, -1]])) == []  # LFs that never vote are not judged
