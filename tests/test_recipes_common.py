"""What every pretraining recipe shares (muppets.recipes.common): the corpus stage never
overwrites a directory the user named, only the run's own ``<run_dir>/corpus``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from muppets.data.shards import tokenizer_fingerprint
from muppets.errors import ConfigError
from muppets.recipes.common import CorpusSection, prepare_once
from muppets.tokenizers.words import WordVocab

TEXT = "The cat sat on the mat. A dog ran far away.\n\nThe Dog came back. The cat did not.\n"


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.fixture()
def raw(tmp_path: Path) -> Path:
    path = tmp_path / "raw.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def _vocabs() -> tuple[WordVocab, WordVocab]:
    return WordVocab.build([TEXT], min_count=1), WordVocab.build([TEXT], min_count=1, lowercase=False)


def test_a_named_corpus_of_another_tokenizer_is_an_error_not_overwritten(tmp_path: Path, raw: Path) -> None:
    first, second = _vocabs()
    named = tmp_path / "shared-corpus"
    sec = CorpusSection(inputs=[str(raw)], prepared=str(named), workers=1)
    prepare_once(sec, first, tmp_path / "run-a")
    before = _files(named)
    with pytest.raises(ConfigError) as err:
        prepare_once(sec, second, tmp_path / "run-b")
    message = str(err.value)
    assert str(named) in message and "corpus.prepared" in message
    assert tokenizer_fingerprint(first.to_json()) in message
    assert tokenizer_fingerprint(second.to_json()) in message
    assert _files(named) == before  # untouched
    assert prepare_once(sec, first, tmp_path / "run-c").directory == named  # still reused


def test_a_named_directory_that_is_no_corpus_is_an_error(tmp_path: Path, raw: Path) -> None:
    named = tmp_path / "my-notes"
    named.mkdir()
    (named / "keep.txt").write_text("precious", encoding="utf-8")
    sec = CorpusSection(inputs=[str(raw)], prepared=str(named), workers=1)
    with pytest.raises(ConfigError, match="my-notes"):
        prepare_once(sec, _vocabs()[0], tmp_path / "run")
    assert _files(named) == {"keep.txt": b"precious"}


def test_a_named_directory_that_does_not_exist_is_prepared(tmp_path: Path, raw: Path) -> None:
    named = tmp_path / "new" / "corpus"
    sec = CorpusSection(inputs=[str(raw)], prepared=str(named), workers=1)
    assert prepare_once(sec, _vocabs()[0], tmp_path / "run").num_documents == 2


def test_the_runs_own_corpus_is_rebuilt_for_a_new_tokenizer(tmp_path: Path, raw: Path) -> None:
    first, second = _vocabs()
    run_dir = tmp_path / "run"
    for sec in (CorpusSection(inputs=[str(raw)], workers=1),  # "" = <run_dir>/corpus
                CorpusSection(inputs=[str(raw)], prepared=str(run_dir / "corpus"), workers=1)):
        for vocab in (first, second):
            corpus = prepare_once(sec, vocab, run_dir)
            assert corpus.directory == run_dir / "corpus"
            meta = json.loads((run_dir / "corpus" / "meta.json").read_text())
            assert meta["tokenizer_sha256"] == tokenizer_fingerprint(vocab.to_json())
