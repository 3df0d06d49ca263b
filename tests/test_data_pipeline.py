"""The corpus pipeline: readers → sentence splitter → tokenizer → memmap shards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordPiece
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer

from muppets.data.prepare import prepare_corpus
from muppets.data.readers import ReadStats, detect_format, iter_documents, list_files
from muppets.data.sentences import split_sentences
from muppets.data.shards import ShardWriter, TokenCorpus, token_dtype, tokenizer_fingerprint
from muppets.errors import DataError
from muppets.paths import data_dir

# ----------------------------------------------------------------------------- helpers


class StandInTokenizer:
    """The tokenizer contract prepare_corpus needs, built on ``tokenizers`` (BERT-style)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tok = tokenizer
        self.vocab_size = tokenizer.get_vocab_size()

    @classmethod
    def from_vocab(cls, vocab: dict[str, int]) -> StandInTokenizer:
        tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]"))
        tok.normalizer = BertNormalizer(lowercase=True)
        tok.pre_tokenizer = BertPreTokenizer()
        return cls(tok)

    @classmethod
    def from_json(cls, text: str) -> StandInTokenizer:
        return cls(Tokenizer.from_str(text))

    def to_json(self) -> str:
        return self._tok.to_str()

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]


class FailingTokenizer(StandInTokenizer):
    """Raises on the third batch: simulates a crash in the middle of a run."""

    calls = 0

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        type(self).calls += 1
        if type(self).calls >= 3:
            raise RuntimeError("boom")
        return super().encode_batch(texts)


def tiny_vocab() -> dict[str, int]:
    chars = "abcdefghijklmnopqrstuvwxyz0123456789.,!?;:'\"()-"
    words = "the a and of to in he she it was said mr mrs dr stop hello world alice".split()
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars)]
    tokens += [w for w in words if w not in tokens]
    return {t: i for i, t in enumerate(tokens)}


@pytest.fixture(scope="module")
def tokenizer() -> StandInTokenizer:
    return StandInTokenizer.from_vocab(tiny_vocab())


def write(path: Path, text: str | bytes, newline: str = "\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text if isinstance(text, bytes) else text.replace("\n", newline).encode("utf-8")
    path.write_bytes(data)
    return path


GUTENBERG = """The Project Gutenberg EBook of Test, by Nobody

This eBook is for the use of anyone anywhere under the Project Gutenberg License.

*** START OF THIS PROJECT GUTENBERG EBOOK TEST ***

Produced by A Volunteer

CHAPTER I.

It was a dark and stormy
night. Mr. Smith said
hello.

"Stop!" he said.

End of the Project Gutenberg EBook of Test, by Nobody

*** END OF THIS PROJECT GUTENBERG EBOOK TEST ***

Section 1. General Terms of Use and Redistributing Project Gutenberg License.
"""

WIKI = """<doc id="1" url="http://x?curid=1" title="Alpha">
Alpha

Alpha is a letter. It comes first.
History.
It was used by the Greeks.
</doc>
<doc id="2" url="http://x?curid=2" title="Empty">
Empty


</doc>
<doc id="3" url="http://x?curid=3" title="Beta">
Beta

Beta is second.
</doc>
"""


def docs_of(*paths: Path, **kwargs: object) -> list[list[str]]:
    return [d.paragraphs for d in iter_documents(list(paths), **kwargs)]


# ----------------------------------------------------------------------------- readers


def test_gutenberg_strips_licence_and_joins_crlf_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "book.txt", GUTENBERG, newline="\r\n")
    assert detect_format(path) == "gutenberg"
    (doc,) = iter_documents([path])
    assert doc.paragraphs == [
        "CHAPTER I.",
        "It was a dark and stormy night. Mr. Smith said hello.",
        '"Stop!" he said.',
    ]
    assert doc.source == f"{path}:6"  # the line after START
    assert not any("\r" in p or "Gutenberg" in p for p in doc.paragraphs)


def test_gutenberg_without_start_marker_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "book.txt", "just text\n")
    with pytest.raises(DataError, match="START OF THE PROJECT GUTENBERG") as info:
        list(iter_documents([path], fmt="gutenberg"))
    assert info.value.path == str(path)


def test_wikiextractor_articles_titles_and_empty_ones(tmp_path: Path) -> None:
    path = write(tmp_path / "wiki_00", WIKI)
    stats = ReadStats()
    docs = list(iter_documents([tmp_path], stats=stats))
    assert [d.paragraphs for d in docs] == [
        ["Alpha is a letter. It comes first.", "History.", "It was used by the Greeks."],
        ["Beta is second."],
    ]
    assert [d.source for d in docs] == [f"{path}:1", f"{path}:13"]
    assert stats.empty_documents == 1 and stats.documents == 2
    assert stats.formats == {"wikiextractor": 1}


def test_wikiextractor_unclosed_doc(tmp_path: Path) -> None:
    path = write(tmp_path / "w.txt", '<doc id="1" title="A">\nA\n\nBody.\n')
    with pytest.raises(DataError, match="never closed") as info:
        list(iter_documents([path]))
    assert info.value.line == 1


def test_plain_text_blank_line_is_a_document_break(tmp_path: Path) -> None:
    path = write(tmp_path / "t.txt", "First Citizen:\nBefore we proceed.\n\n\nAll:\nSpeak.\n")
    docs = list(iter_documents([path]))
    assert [d.paragraphs for d in docs] == [["First Citizen: Before we proceed."],
                                            ["All: Speak."]]
    assert [d.source for d in docs] == [f"{path}:1", f"{path}:5"]


def test_jsonl_documents_and_paragraph_rules(tmp_path: Path) -> None:
    lines = [{"text": "One.\nTwo."}, {"text": "Para one\nwrapped.\n\nPara two."},
             {"body": "other field"}, {"body": ""}]
    path = write(tmp_path / "d.jsonl", "\n".join(json.dumps(x) for x in lines[:2]) + "\n\n")
    assert docs_of(path) == [["One.", "Two."], ["Para one wrapped.", "Para two."]]
    other = write(tmp_path / "e.jsonl", json.dumps(lines[2]) + "\n" + json.dumps(lines[3]))
    stats = ReadStats()
    assert docs_of(other, text_field="body", stats=stats) == [["other field"]]
    assert stats.skipped_lines == 0 and stats.empty_documents == 1
    with pytest.raises(DataError, match="no 'text' field") as info:
        docs_of(other)
    assert (info.value.path, info.value.line) == (str(other), 1)


def test_malformed_jsonl_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.jsonl", '{"text": "ok"}\n{"text": oops}\n')
    with pytest.raises(DataError, match="malformed JSON") as info:
        docs_of(path)
    assert str(info.value).startswith(f"{path}:2:")
    stats = ReadStats()
    assert docs_of(path, errors="skip", stats=stats) == [["ok"]]
    assert stats.skipped_lines == 1


def test_directory_walk_is_sorted_and_skips_non_corpus_files(tmp_path: Path) -> None:
    write(tmp_path / "b" / "2.txt", "two\n")
    write(tmp_path / "a.txt", "one\n")
    write(tmp_path / "b" / "MANIFEST.tsv", "file\tbytes\n")
    write(tmp_path / "b" / ".hidden.txt", "hidden\n")
    write(tmp_path / ".git" / "x.txt", "hidden\n")
    write(tmp_path / "meta.json", "{}\n")
    assert list_files([tmp_path]) == [tmp_path / "a.txt", tmp_path / "b" / "2.txt"]
    assert docs_of(tmp_path) == [["one"], ["two"]]


def test_missing_path_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file") as info:
        list(iter_documents([tmp_path / "nope.txt"]))
    assert info.value.path == str(tmp_path / "nope.txt")
    write(tmp_path / "d" / "MANIFEST.tsv", "x\n")
    with pytest.raises(DataError, match="no text files") as info:
        list(iter_documents([tmp_path / "d"]))
    assert info.value.path == str(tmp_path / "d")


def test_empty_file_is_an_error_or_skipped(tmp_path: Path) -> None:
    empty = write(tmp_path / "a_empty.txt", "")
    blank = write(tmp_path / "b_blank.txt", "\n  \r\n")
    write(tmp_path / "c.txt", "text\n")
    with pytest.raises(DataError, match="empty") as info:
        list(iter_documents([tmp_path]))
    assert info.value.path == str(empty)
    stats = ReadStats()
    assert docs_of(tmp_path, errors="skip", stats=stats) == [["text"]]
    assert stats.skipped_files == 2 and stats.files == 1
    with pytest.raises(DataError, match="empty"):
        list(iter_documents([blank]))


def test_invalid_utf8_names_file_line_and_byte(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.txt", b"good line\nbad \xff\xfe here\nok\n")
    with pytest.raises(DataError, match="invalid UTF-8") as info:
        list(iter_documents([path]))
    err = info.value
    assert (err.path, err.line, err.position) == (str(path), 2, 14)
    assert str(err).startswith(f"{path}:2 (byte 14):") and r"\xff" in str(err)
    stats = ReadStats()
    assert docs_of(path, errors="replace", stats=stats) == [["good line bad \ufffd\ufffd here ok"]]
    assert stats.replaced == 2
    assert docs_of(path, errors="skip") == [["good line ok"]]


def test_bom_is_removed(tmp_path: Path) -> None:
    path = write(tmp_path / "bom.txt", "\ufeffHello.\n")
    assert docs_of(path) == [["Hello."]]


# ----------------------------------------------------------------------------- sentences


@pytest.mark.parametrize("text, expected", [
    ("Hello world. How are you? Fine!", ["Hello world.", "How are you?", "Fine!"]),
    ("Mr. and Mrs. Smith met Dr. Jones at St. Paul's.", None),
    ("J. R. R. Tolkien wrote it. He was British.", ["J. R. R. Tolkien wrote it.",
                                                    "He was British."]),
    ("Pi is 3.14 roughly. Yes.", ["Pi is 3.14 roughly.", "Yes."]),
    ("Use tools, e.g. a hammer, i.e. a tool. Done.", ["Use tools, e.g. a hammer, i.e. a tool.",
                                                      "Done."]),
    ("He lives in the U.S. now. Really.", ["He lives in the U.S. now.", "Really."]),
    ('"Stop!" he said. Then he left.', ['"Stop!" he said.', "Then he left."]),
    ("“Is it?” asked Alice. ‘Yes.’ She nodded.", ["“Is it?” asked Alice.", "‘Yes.’",
                                                  "She nodded."]),
    ('He said "Go." Then he went.', ['He said "Go."', "Then he went."]),
    ("(This is aside.) Next one.", ["(This is aside.)", "Next one."]),
    ("Wait... what? I waited… Then he came.", ["Wait... what?", "I waited…",
                                              "Then he came."]),
    ("See Fig. 3 and No. 5 on Jan. 12. Good.", ["See Fig. 3 and No. 5 on Jan. 12.", "Good."]),
    ("Apples, pears, etc. are fruit. Bananas too.", ["Apples, pears, etc. are fruit.",
                                                     "Bananas too."]),
    ("It was 5 p.m. when we left.", None),
    ("Really?! Yes.", ["Really?!", "Yes."]),
    ("我爱你。你爱我吗？是的！", ["我爱你。", "你爱我吗？", "是的！"]),
    ("「走吧。」他说。", ["「走吧。」", "他说。"]),
    ("No terminal punctuation", None),
    ("  ", []),
])
def test_split_sentences(text: str, expected: list[str] | None) -> None:
    assert split_sentences(text) == ([text] if expected is None else expected)


# ----------------------------------------------------------------------------- shards


def test_token_dtype_choice() -> None:
    assert token_dtype(30522) == np.uint16 and token_dtype(65535) == np.uint16
    assert token_dtype(65536) == np.uint32 and token_dtype(250002) == np.uint32


def test_shard_writer_round_trip_and_empty_skipping(tmp_path: Path) -> None:
    out = tmp_path / "c"
    with ShardWriter(out, vocab_size=70_000) as writer:
        assert writer.add_document([[1, 2], [], [69_999]])
        assert not writer.add_document([[], []])
        writer.add_encoded(np.array([7, 8, 9]), np.array([0, 3, 0]), np.array([1, 2]))
    corpus = TokenCorpus(out)
    assert corpus.tokens.dtype == np.uint32 and corpus.meta["dtype"] == "uint32"
    assert (corpus.num_documents, corpus.num_sentences, corpus.num_tokens) == (2, 3, 6)
    assert [corpus.sentence(i).tolist() for i in range(3)] == [[1, 2], [69_999], [7, 8, 9]]
    assert corpus.document_sentences(1) == range(2, 3)
    assert corpus.sentence_lengths.tolist() == [2, 1, 3]
    assert corpus.doc_sentence_bounds.tolist() == [[0, 2], [2, 3]]
    assert corpus.document_tokens(0).tolist() == [1, 2, 69_999]
    assert corpus.meta["skipped"]["empty_documents"] == 2
    assert corpus.meta["skipped"]["empty_sentences"] == 5
    assert list(tmp_path.iterdir()) == [out]  # no temporary leftovers


def test_shard_writer_rejects_out_of_vocab_and_existing_dir(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="outside the vocabulary"):
        with ShardWriter(tmp_path / "c", vocab_size=10) as writer:
            writer.add_document([[3, 10]])
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "c").mkdir()
    with pytest.raises(DataError, match="already exists"):
        ShardWriter(tmp_path / "c", vocab_size=10)


def test_overwrite_replaces_only_a_prepared_corpus(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("years of work")
    (tmp_path / "notes.txt").write_text("keep me")
    for target, words in ((mine, "not a prepared corpus"), (tmp_path / "notes.txt", "is a file")):
        with pytest.raises(DataError, match=words):
            ShardWriter(target, vocab_size=10, overwrite=True)
    assert (mine / "thesis.txt").read_text() == "years of work" and (tmp_path / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "notes.txt"]
    corpus = tmp_path / "c"
    for tokens in ([[1, 2]], [[3]]):  # a prepared corpus is replaced; an empty directory is filled
        with ShardWriter(corpus, vocab_size=10, overwrite=True) as writer:
            writer.add_document(tokens)
    assert TokenCorpus(corpus).sentence(0).tolist() == [3]
    (tmp_path / "empty").mkdir()
    with ShardWriter(tmp_path / "empty", vocab_size=10, overwrite=True) as writer:
        writer.add_document([[4]])
    assert TokenCorpus(tmp_path / "empty").num_tokens == 1


@pytest.mark.parametrize("meta", ['{"author": "me"}', "{not json", '["a list"]', '{"format": "my-own"}'])
def test_overwrite_refuses_a_folder_whose_meta_json_is_no_corpus(tmp_path: Path, meta: str) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "meta.json").write_text(meta)
    (mine / "thesis.tex").write_text("years of work")
    with pytest.raises(DataError, match="not a prepared corpus"):
        with ShardWriter(mine, vocab_size=10, overwrite=True) as writer:
            writer.add_document([[1, 2]])
    assert (mine / "thesis.tex").read_text() == "years of work" and (mine / "meta.json").read_text() == meta


def test_a_file_reached_twice_is_listed_once(tmp_path: Path) -> None:
    write(tmp_path / "d" / "a.txt", "one\n")
    write(tmp_path / "d" / "b.txt", "two\n")
    (tmp_path / "d" / "link.txt").symlink_to(tmp_path / "d" / "a.txt")
    files = list_files([tmp_path / "d", tmp_path / "d" / "b.txt"])
    assert files == [tmp_path / "d" / "a.txt", tmp_path / "d" / "b.txt"]
    assert docs_of(tmp_path / "d") == [["one"], ["two"]]


def test_leftovers_of_a_killed_write_are_removed_by_the_next(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs
    from muppets.config import _HOST_TAG

    stale = tmp_path / f".tmp-c-h{_HOST_TAG}.{dead.pid}"
    stale.mkdir()
    (stale / "tokens.bin").write_bytes(b"\0" * 64)
    only_copy = tmp_path / f".old-d-h{_HOST_TAG}.{dead.pid}"  # killed between its renames: d itself is missing
    only_copy.mkdir()
    with ShardWriter(tmp_path / "c", vocab_size=10) as writer:
        writer.add_document([[1]])
    assert not stale.exists()
    with pytest.raises(DataError, match="outside the vocabulary"):  # a write to d while d is missing
        with ShardWriter(tmp_path / "d", vocab_size=10) as writer:
            writer.add_document([[99]])
    assert only_copy.exists()  # the only copy of d is kept
    with ShardWriter(tmp_path / "d", vocab_size=10) as writer:
        writer.add_document([[1]])
    with ShardWriter(tmp_path / "d", vocab_size=10, overwrite=True) as writer:  # d exists now
        writer.add_document([[2]])
    assert not only_copy.exists()


def test_token_corpus_validates_files(tmp_path: Path) -> None:
    out = tmp_path / "c"
    with ShardWriter(out, vocab_size=100) as writer:
        writer.add_document([[1, 2, 3], [4]])
    good = (out / "tokens.bin").read_bytes()
    (out / "tokens.bin").write_bytes(good + b"\0\0")
    with pytest.raises(DataError, match="bytes but meta.json") as info:
        TokenCorpus(out)
    assert info.value.path == str(out / "tokens.bin")
    (out / "tokens.bin").write_bytes(good)
    (out / "documents.bin").write_bytes(np.array([1], dtype="<i8").tobytes())
    with pytest.raises(DataError, match="last offset is 1") as info:
        TokenCorpus(out)
    assert info.value.path == str(out / "documents.bin")
    (out / "sentences.bin").unlink()
    with pytest.raises(DataError, match="missing"):
        TokenCorpus(out)
    (out / "meta.json").unlink()
    with pytest.raises(DataError, match="meta.json"):
        TokenCorpus(out)


# ----------------------------------------------------------------------------- prepare


def make_inputs(root: Path) -> Path:
    write(root / "books" / "book.txt", GUTENBERG, newline="\r\n")
    write(root / "wiki" / "wiki_00", WIKI)
    write(root / "plain.txt", "Hello world. Alice said hello.\n\nThe end. Or is it?\n")
    write(root / "d.jsonl", "\n".join(json.dumps({"text": t}) for t in [
        "Dr. Who said hello. She said stop!", "", "A second doc.\n\nTwo paragraphs."]) + "\n")
    return root


def test_prepare_round_trip(tmp_path: Path, tokenizer: StandInTokenizer) -> None:
    inputs = make_inputs(tmp_path / "in")
    summary = prepare_corpus([inputs], tokenizer, tmp_path / "out", workers=1, progress=False)
    corpus = TokenCorpus(tmp_path / "out")
    expected = [[split_sentences(p) for p in d] for d in docs_of(inputs)]
    sentences = [s for d in expected for p in d for s in p]
    assert corpus.num_documents == summary.documents == len(expected) == 7
    assert corpus.num_sentences == summary.sentences == len(sentences)
    for i, sentence in enumerate(sentences):
        assert corpus.sentence(i).tolist() == tokenizer.encode_batch([sentence])[0]
    assert corpus.tokens.dtype == np.uint16
    assert summary.empty_documents == 2  # the empty wiki article and the empty jsonl text
    meta = corpus.meta
    assert meta["tokenizer_sha256"] == tokenizer_fingerprint(tokenizer.to_json())
    assert meta["files"] == 4 and meta["sources"] == [str(inputs)]
    assert meta["num_tokens"] == summary.tokens == corpus.num_tokens


def test_prepare_output_identical_for_any_worker_count(tmp_path: Path,
                                                       tokenizer: StandInTokenizer) -> None:
    inputs = make_inputs(tmp_path / "in")
    outs = []
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        prepare_corpus([inputs], tokenizer, out, workers=workers, batch_docs=2,
                       progress=False)
        outs.append(out)
    for name in ("tokens.bin", "sentences.bin", "documents.bin"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    metas = [json.loads((o / "meta.json").read_text()) for o in outs]
    for meta in metas:
        meta.pop("created")
    assert metas[0] == metas[1]


@pytest.mark.parametrize("workers", [1, 2])
def test_prepare_interrupted_leaves_no_output(tmp_path: Path, workers: int) -> None:
    inputs = make_inputs(tmp_path / "in")
    FailingTokenizer.calls = 0
    failing = FailingTokenizer.from_vocab(tiny_vocab())
    with pytest.raises(RuntimeError, match="boom"):
        prepare_corpus([inputs], failing, tmp_path / "out", workers=workers, batch_docs=1,
                       progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def fail_repeatedly(root: str, times: int) -> None:
    """The worker-error path ``times`` times in a row (run in a child process by the test below)."""
    for i in range(times):
        work = Path(root) / str(i)
        inputs = make_inputs(work / "in")
        FailingTokenizer.calls = 0
        failing = FailingTokenizer.from_vocab(tiny_vocab())
        with pytest.raises(RuntimeError, match="boom"):
            prepare_corpus([inputs], failing, work / "out", workers=2, batch_docs=1, progress=False)
        assert not (work / "out").exists()


def test_prepare_worker_error_never_hangs(tmp_path: Path) -> None:
    # multiprocessing.Pool's terminate() on the way out of a worker error deadlocked now and then
    # (within a few hundred repetitions on 2 busy cores); a hang here fails by the timeout.
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); " \
           f"import test_data_pipeline as t; t.fail_repeatedly({str(tmp_path)!r}, 300)"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=240)


def test_prepare_reader_error_midway_leaves_no_output(tmp_path: Path,
                                                      tokenizer: StandInTokenizer) -> None:
    inputs = make_inputs(tmp_path / "in")
    write(inputs / "zz_bad.txt", b"fine\n\xc3\x28 broken\n")
    with pytest.raises(DataError, match="invalid UTF-8"):
        prepare_corpus([inputs], tokenizer, tmp_path / "out", workers=1, batch_docs=1,
                       progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]
    summary = prepare_corpus([inputs], tokenizer, tmp_path / "out", workers=1,
                             errors="replace", progress=False)
    assert summary.replaced == 1 and summary.documents == 8


# ----------------------------------------------------------------------------- real data


@pytest.fixture(scope="module")
def bert_tokenizer() -> StandInTokenizer:
    path = data_dir() / "vocab" / "bert-base-uncased" / "vocab.txt"
    vocab = {line.rstrip("\n"): i for i, line in enumerate(path.open(encoding="utf-8"))}
    return StandInTokenizer.from_vocab(vocab)


def test_real_book_and_wiki_shard(tmp_path: Path, bert_tokenizer: StandInTokenizer) -> None:
    corpus_dir = data_dir() / "english-corpus"
    book = corpus_dir / "books" / "carroll_alice_in_wonderland.txt"
    shard = corpus_dir / "wiki" / "AA_wiki_00.txt"
    summary = prepare_corpus([book, shard], bert_tokenizer, tmp_path / "out", workers=2,
                             progress=False)
    corpus = TokenCorpus(tmp_path / "out")
    assert summary.files == 2 and corpus.num_documents == 1 + 38  # one book, 38 articles
    assert 800 < len(corpus.document_sentences(0)) < 2500  # Alice: ~1,000-2,000 sentences
    assert 150_000 < corpus.num_tokens < 400_000  # ~190 k words → ~1.2 subwords per word
    assert corpus.tokens.dtype == np.uint16 and corpus.vocab_size == 30522
    assert 5 < corpus.sentence_lengths.mean() < 60
    book_text = " ".join(p for d in iter_documents([book]) for p in d.paragraphs)
    assert "Project Gutenberg" not in book_text and "License" not in book_text
    assert book_text.startswith("ALICE’S ADVENTURES IN WONDERLAND")
    assert book_text.endswith("and the happy summer days. THE END")


def test_prepare_with_the_project_wordpiece_tokenizer(tmp_path: Path) -> None:
    wordpiece = pytest.importorskip("muppets.tokenizers.wordpiece")
    vocab = data_dir() / "vocab" / "bert-base-uncased" / "vocab.txt"
    tokenizer = wordpiece.WordPieceTokenizer.from_vocab(vocab)
    inputs = make_inputs(tmp_path / "in")
    for workers in (1, 2):  # workers rebuild it with WordPieceTokenizer.from_json
        prepare_corpus([inputs], tokenizer, tmp_path / f"out{workers}", workers=workers,
                       batch_docs=2, progress=False)
    one, two = TokenCorpus(tmp_path / "out1"), TokenCorpus(tmp_path / "out2")
    assert np.array_equal(one.tokens, two.tokens)
    assert np.array_equal(one.sentence_ends, two.sentence_ends)
    first = split_sentences(docs_of(inputs)[0][0])[0]  # "Dr. Who said hello."
    assert one.sentence(0).tolist() == tokenizer.encode_batch([first])[0]
