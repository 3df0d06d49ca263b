"""Labeling functions and the applier: votes, errors naming the LF / file and line, the cache
(hit, invalidation on an LF code change) and parallel == sequential."""

from __future__ import annotations

import re

import numpy as np
import pytest

from muppets.errors import ConfigError, DataError, LabelingFunctionError
from muppets.tasks.spec import TextExample
from muppets.weak import (ABSTAIN, LabelingFunction, apply_lfs, keyword_lf, labeling_function,
                          length_lf, lexicon_lf, load_lfs, read_texts, regex_lf)

TEXTS = ["Check out my channel!", "great song", "please subscribe http://x.y", "nice",
         "I love this song so much, it is great"]


def examples(texts=TEXTS):
    return [TextExample(f"c{i}", t, None, None, f"mem:{i + 1}") for i, t in enumerate(texts)]


def test_builders_and_decorator_vote_as_documented() -> None:
    @labeling_function(resources={"words": ("love",)})
    def loves(x, words):
        return 0 if any(w in x.text.lower() for w in words) else ABSTAIN

    lfs = [keyword_lf("kw_my", ["my"], 1), regex_lf("check_out", r"check.*out", 1),
           length_lf("short", 0, below=3), lexicon_lf("lex", {"great": 0, "subscribe": 1}), loves]
    L = apply_lfs(lfs, examples(), 2, progress=False)
    assert L.dtype == np.int64 and L.shape == (5, 5)
    assert L.tolist() == [[1, 1, -1, -1, -1],
                          [-1, -1, 0, 0, -1],
                          [-1, -1, -1, 1, -1],
                          [-1, -1, 0, -1, -1],
                          [-1, -1, -1, 0, 0]]
    assert loves.name == "loves" and regex_lf("r", "x", 1).resources["pattern"].flags & re.I


def test_lf_that_raises_names_the_lf_and_example() -> None:
    @labeling_function(name="fragile")
    def fragile(x):
        return 1 if x.text[20] == "z" else ABSTAIN

    with pytest.raises(LabelingFunctionError) as err:
        apply_lfs([keyword_lf("kw", ["my"], 1), fragile], examples(), 2, progress=False)
    message = str(err.value)
    assert "'fragile'" in message and "example 1" in message and "'c1'" in message
    assert "IndexError" in message and "mem:2" in message
    assert err.value.lf == "fragile" and err.value.index == 1


@pytest.mark.parametrize("bad", [2, "1", 1.0, True, None, -2])
def test_vote_outside_the_classes_names_lf_example_and_value(bad) -> None:
    lf = LabelingFunction("odd", lambda x: bad if x.id == "c3" else ABSTAIN)
    with pytest.raises(LabelingFunctionError) as err:
        apply_lfs([lf], examples(), 2, progress=False)
    assert "'odd'" in str(err.value) and "example 3" in str(err.value) and "'c3'" in str(err.value)
    assert err.value.value == bad or err.value.value is bad


def test_numpy_integer_votes_are_accepted() -> None:
    lf = LabelingFunction("np", lambda x: np.int64(1))
    assert apply_lfs([lf], examples()[:2], 2, progress=False).tolist() == [[1], [1]]


def test_text_file_with_bad_bytes_names_file_and_line(tmp_path) -> None:
    path = tmp_path / "texts.txt"
    path.write_bytes(b"first line\nsecond \xff line\nthird\n")
    with pytest.raises(DataError) as err:
        read_texts(path)
    assert str(path) in str(err.value) and ":2" in str(err.value)


def test_text_file_examples_skip_blank_lines(tmp_path) -> None:
    path = tmp_path / "texts.txt"
    path.write_text("one\n\n  two  \n", encoding="utf-8")
    got = read_texts(path)
    assert [(e.id, e.text, e.source) for e in got] == [
        ("texts.txt:1", "one", f"{path}:1"), ("texts.txt:3", "two", f"{path}:3")]


LF_FILE = '''
from muppets.weak import ABSTAIN, labeling_function
CALLS = []

@labeling_function()
def has_my(x):
    CALLS.append(x.id)
    return {vote} if "my" in x.text.lower() else ABSTAIN
'''


def test_cache_hit_runs_no_lf_and_code_change_invalidates(tmp_path) -> None:
    lf_path, cache = tmp_path / "lfs.py", tmp_path / "cache"
    lf_path.write_text(LF_FILE.format(vote=1), encoding="utf-8")
    lfs = load_lfs(lf_path)
    first = apply_lfs(lfs, examples(), 2, cache_dir=cache, progress=False)
    module_calls = lfs[0].func.__globals__["CALLS"]
    assert len(module_calls) == 5 and len(list(cache.glob("L-*.npy"))) == 1
    again = apply_lfs(lfs, examples(), 2, cache_dir=cache, progress=False)
    assert np.array_equal(first, again) and len(module_calls) == 5  # read from the cache
    lf_path.write_text(LF_FILE.format(vote=0), encoding="utf-8")  # same name, new code
    changed = apply_lfs(load_lfs(lf_path), examples(), 2, cache_dir=cache, progress=False)
    assert changed[0, 0] == 0 and first[0, 0] == 1 and len(list(cache.glob("L-*.npy"))) == 2
    other_data = apply_lfs(lfs, examples(TEXTS[:3]), 2, cache_dir=cache, progress=False)
    assert other_data.shape == (3, 1) and len(list(cache.glob("L-*.npy"))) == 3
    assert not list(cache.glob(".*tmp"))  # atomic writes leave no temporary file


def test_a_damaged_cache_is_named_and_computed_again(tmp_path, caplog) -> None:
    lfs, cache = [keyword_lf("kw_my", ["my"], 1)], tmp_path / "cache"
    first = apply_lfs(lfs, examples(), 2, cache_dir=cache, progress=False)
    (path,) = cache.glob("L-*.npy")
    damaged = first.copy()
    damaged[2, 0] = 7  # no class of a binary task: a cache written by something else
    np.save(path, damaged)
    with caplog.at_level("WARNING", logger="muppets.weak.apply"):
        again = apply_lfs(lfs, examples(), 2, cache_dir=cache, progress=False)
    assert np.array_equal(again, first)
    assert f"ignoring label-matrix cache {path}: label matrix entry [2, 0] = 7" in caplog.text
    assert np.array_equal(np.load(path), first)  # the cache is written again, right


def test_keyword_resources_key_the_cache_apart() -> None:
    assert keyword_lf("k", ["my"], 1).cache_key() != keyword_lf("k", ["plz"], 1).cache_key()


SET_RESOURCE_KEY = """
from muppets.weak import LabelingFunction
def vote(x, words, table):
    return 1 if words & set(x.text.split()) else -1
lf = LabelingFunction("kw", vote, {"words": {"buy", "now", "cheap", "plz", "sub", "free", "win"},
                                  "table": {"b": frozenset({"x", "y", "z"}), "a": [{"q", "r", "s"}]}})
print(lf.cache_key())
"""


def test_a_set_resource_keys_the_cache_alike_in_every_process(tmp_path) -> None:
    import os
    import subprocess
    import sys

    script = tmp_path / "key.py"
    script.write_text(SET_RESOURCE_KEY, encoding="utf-8")
    keys = {subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout.strip()
            for seed in (0, 1, 2, 3)}
    assert len(keys) == 1 and len(next(iter(keys))) == 64
    from muppets.weak.lf import _resource_repr
    assert _resource_repr({"b": 1, "a": {3, 1, 2}}) == _resource_repr({"a": {2, 3, 1}, "b": 1})
    assert _resource_repr({"a", "b"}) != _resource_repr({"a", "c"})


def test_parallel_equals_sequential_and_errors_cross_processes() -> None:
    lfs = [keyword_lf("kw_my", ["my"], 1), length_lf("short", 0, below=3)]
    data = examples(TEXTS * 7)
    assert np.array_equal(apply_lfs(lfs, data, 2, n_jobs=2, progress=False),
                          apply_lfs(lfs, data, 2, progress=False))
    bad = LabelingFunction("bad", lambda x: 5 if x.id == "c33" else ABSTAIN)
    with pytest.raises(LabelingFunctionError, match=r"'bad' on example 33 \(id 'c33'"):
        apply_lfs([bad], data, 2, n_jobs=2, progress=False)


def test_lf_file_errors(tmp_path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_lfs(tmp_path / "missing.py")
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="no labeling functions"):
        load_lfs(empty)
    dup = tmp_path / "dup.py"
    dup.write_text("from muppets.weak import keyword_lf\nLFS = [keyword_lf('a', ['x'], 1), "
                   "keyword_lf('a', ['y'], 1)]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="duplicate"):
        load_lfs(dup)
    single = tmp_path / "single.py"
    single.write_text("from muppets.weak import keyword_lf\nLFS = keyword_lf('a', ['x'], 1)\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"single\.py: LFS must be a list of labeling functions, got "):
        load_lfs(single)


HELPER_FILE = '''
from muppets.weak import labeling_function
WORDS = {words}
def hits(text):
    return any(w in text.lower() for w in WORDS)
@labeling_function()
def uses_helper(x):
    return 1 if hits(x.text) else -1
LFS = [uses_helper]
'''


def test_editing_a_helper_or_word_list_invalidates_the_cache(tmp_path) -> None:
    """The LF's own source is unchanged; the module-level list it reads through a helper is not."""
    lf_path, cache = tmp_path / "lfs.py", tmp_path / "cache"
    lf_path.write_text(HELPER_FILE.format(words='["song"]'), encoding="utf-8")
    first = apply_lfs(load_lfs(lf_path), examples(), 2, cache_dir=cache, progress=False)
    lf_path.write_text(HELPER_FILE.format(words='["channel"]'), encoding="utf-8")
    second = apply_lfs(load_lfs(lf_path), examples(), 2, cache_dir=cache, progress=False)
    assert first[0, 0] == ABSTAIN and second[0, 0] == 1  # "Check out my channel!"


def test_example_meta_keys_the_cache_apart(tmp_path) -> None:
    from muppets.weak.apply import matrix_key
    lfs = [keyword_lf("kw_my", ["my"], 1)]
    a, b = examples(), examples()
    b[0].meta = {"video": "05"}
    assert matrix_key(lfs, a, 2) != matrix_key(lfs, b, 2)
