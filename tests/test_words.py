"""Word vocabulary: splitting, deterministic build with min_count / max_size, unk counts, files,
errors, and the corpus pipeline writing word-id shards."""

from __future__ import annotations

import pytest

from muppets.data.prepare import prepare_corpus
from muppets.data.shards import TokenCorpus
from muppets.errors import ConfigError, DataError
from muppets.tokenizers.words import WordVocab, split_words


def test_split_and_build():
    assert split_words("Don't panic, well-known cat.") == ["don't", "panic", ",", "well-known", "cat", "."]
    assert split_words("Ab  cD", lowercase=False) == ["Ab", "cD"]
    texts = ["the cat sat .", "the dog sat !", "a cat"]
    v = WordVocab.build(texts, min_count=2)
    assert v.words == ["<pad>", "<unk>", "<s>", "</s>", "cat", "sat", "the"]  # by count, then word
    assert v.counts.tolist() == [0, 4, 0, 0, 2, 2, 2]  # unk: ". dog ! a"
    assert v.encode("The cat barked") == [6, 4, v.unk_id]
    assert WordVocab.build(reversed(texts), min_count=2).words == v.words
    assert len(WordVocab.build(texts, min_count=1, max_size=6)) == 6


def test_files_and_json_round_trip(tmp_path):
    v = WordVocab.build(["x y y z z z"], min_count=1)
    same = WordVocab.load(v.save(tmp_path / "v"))
    assert same.words == v.words and same.counts.tolist() == v.counts.tolist()
    assert WordVocab.from_json(v.to_json()).encode("z y q") == v.encode("z y q")
    (tmp_path / "v" / "words.txt").write_text("<pad>\t0\nbroken line\n")
    with pytest.raises(DataError, match=r"words.txt:2: .*broken line"):
        WordVocab.load(tmp_path / "v")
    with pytest.raises(ConfigError):
        WordVocab.build(["a"], min_count=0)
    with pytest.raises(ConfigError, match="starts with"):
        WordVocab(["a", "b"], [1, 1])


def test_prepare_corpus_with_words(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.txt").write_text("The cat sat. The dog ran.\n\nA new document here.\n")
    v = WordVocab.build(["the cat sat the dog ran a new document here ."], min_count=1)
    prepare_corpus([tmp_path / "raw"], v, tmp_path / "c", workers=1, progress=False)
    corpus = TokenCorpus(tmp_path / "c")
    assert corpus.num_documents == 2 and corpus.num_sentences == 3
    assert v.decode(corpus.sentence(0).tolist()) == "the cat sat ."
