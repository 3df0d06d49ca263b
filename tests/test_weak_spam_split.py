"""The Snorkel spam tutorial's split: scikit-learn's stratified draw reproduced without it,
and the split's sizes and invariants on the shared data."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from muppets.tasks.splits import legacy_stratified_shuffle_split


@pytest.mark.parametrize("seed, sizes, n_test", [
    (123, (196, 174), 250), (0, (10, 7), 5), (5, (33, 33, 11), 20), (7, (3, 50), 20)])
def test_same_draws_as_scikit_learn(seed, sizes, n_test) -> None:
    train_test_split = pytest.importorskip("sklearn.model_selection").train_test_split
    y = np.repeat(np.arange(len(sizes)), sizes)
    np.random.RandomState(seed).shuffle(y)
    theirs = train_test_split(np.arange(len(y)), test_size=n_test, random_state=seed, stratify=y)
    ours = legacy_stratified_shuffle_split(y, n_test, seed)
    assert all(np.array_equal(a, b) for a, b in zip(theirs, ours))


def test_impossible_split() -> None:
    with pytest.raises(ValueError, match="cannot split"):
        legacy_stratified_shuffle_split([0, 1, 1], 3, 0)


def test_tutorial_split_on_the_shared_data() -> None:
    from muppets.paths import data_dir
    from muppets.tasks.spam import load_spam_tutorial_split

    try:
        root = data_dir()
    except Exception as err:  # noqa: BLE001 - no shared data on this machine
        pytest.skip(str(err))
    splits = load_spam_tutorial_split(root)
    assert {k: len(v) for k, v in splits.items()} == {
        "train": 1586, "dev": 100, "valid": 120, "test": 250}
    train_ids = {id(ex) for ex in splits["train"]}
    assert all(id(ex) in train_ids for ex in splits["dev"])  # dev is drawn from train
    assert Counter(ex.meta["video"] for ex in splits["train"]) == {
        "1": 350, "2": 350, "3": 438, "4": 448}
    assert {ex.meta["video"] for ex in splits["valid"] + splits["test"]} == {"5"}
    assert Counter(ex.label for ex in splits["test"]) == {"0": 132, "1": 118}  # stratified
    assert any("&#39;" in ex.text or "<br />" in ex.text for ex in splits["train"])  # raw text
