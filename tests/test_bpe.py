"""Tests of muppets.tokenizers.bpe (GPT-2's byte-level BPE).

Tiers: a tiny trained tokenizer (determinism, GPT-2 id layout, save → load, from_json,
the corpus pipeline); hand-computed ids for a vocabulary of six merges; parity with
transformers' GPT2TokenizerFast on the real GPT-2 files (ids, offsets, add_prefix_space, and
our saved directories loaded by transformers); lossless decoding of awkward strings and of a
sample of every shared text family; typed errors for broken files. The full-corpus figures
are in benchmarks/bpe_parity.py.
"""

from __future__ import annotations

import csv
import io
import json
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from muppets.data.prepare import prepare_corpus
from muppets.data.readers import iter_documents
from muppets.data.sentences import split_sentences
from muppets.data.shards import TokenCorpus
from muppets.errors import ConfigError, DataError
from muppets.paths import data_dir
from muppets.tokenizers import ByteLevelBPESettings, ByteLevelBPETokenizer
from muppets.tokenizers.bpe import BYTE_SYMBOLS, EOS_TOKEN


# ---------------------------------------------------------------------------- helpers
def _data_root() -> Path:
    try:
        return data_dir()
    except ConfigError:
        pytest.skip("shared data directory not found")


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} not found")
    return path


def _first_difference(what: str, texts: Sequence[Any], ours: list[Any], theirs: list[Any]) -> None:
    """Fail with the count and the first differing input unless the lists are equal."""
    assert len(ours) == len(theirs) == len(texts)
    bad = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    if bad:
        i = bad[0]
        pytest.fail(f"{what}: {len(bad)} of {len(texts)} differ; first #{i}: {texts[i]!r}\n"
                    f"  ours:   {ours[i]!r}\n  theirs: {theirs[i]!r}")


def _spread(items: Sequence[str], n: int) -> list[str]:
    """``n`` items spread evenly over ``items`` (all of them if there are fewer)."""
    step = max(1, len(items) // n)
    return list(items[::step][:n])


def _lines(path: Path, n: int, encoding: str = "utf-8") -> list[str]:
    """``n`` lines spread over the file, split at ``\\n`` only (a CRLF line keeps its ``\\r``)."""
    return _spread(_require(path).read_bytes().decode(encoding).split("\n"), n)


def _squad_like(path: Path, n: int) -> list[str]:
    """Contexts and questions of a SQuAD-format JSON file (SQuAD, CMRC 2018)."""
    data = json.loads(_require(path).read_text(encoding="utf-8"))
    texts = [text for article in data["data"] for par in article["paragraphs"]
             for text in [par["context"]] + [qa["question"] for qa in par["qas"]]]
    return _spread(texts, n)


def _csv_fields(path: Path, n: int) -> list[str]:
    """Every field of a CSV file (YouTube comments hold quoted newlines)."""
    rows = csv.reader(io.StringIO(_require(path).read_text(encoding="utf-8")))
    return _spread([field for row in rows for field in row], n)


SAMPLES = [
    "Hello world", " Hello world", "Hello  world ", "   ", "", "\t", "\n\n\n", "a\r\nb\rc",
    "tabs\tand\nnewlines  and\u00a0nbsp\u200bzero-width \u00adsoft-hyphen \u3000ideographic",
    "北京大学 is in 北京; 東京 and 서울 too.", "emoji 🙂👩‍👩‍👧 flags 🇫🇷 and ∑x² ≥ 3.14",
    "e\u0301 combining, Å vs A\u030a, ﬁ ligature, Ｆｕｌｌｗｉｄｔｈ",
    "I'm, you're, they'll, we'VE, it'S: contractions", "x" * 300 + " " + "123456789" * 5,
    "A literal <|endoftext|> inside, and <|endoftext|><|endoftext|> twice",
    "\x00\x01\x7f control bytes \ufeff BOM \ufffd replacement", "  leading and trailing  ",
]


# ---------------------------------------------------------------------------- 1. trained
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Café au lait is a French coffee drink; the café was busy.",
    "A naïve résumé: tokenization of unaffable words is affable.",
    "北京大学位于北京。東京大学は東京にあります。",
    "Jumping, jumped, jumps: the fox keeps jumping!<|endoftext|>A second document.",
] * 20


@pytest.fixture(scope="module")
def trained() -> ByteLevelBPETokenizer:
    return ByteLevelBPETokenizer.train(CORPUS, vocab_size=400, model_max_length=64)


def test_trained_layout_is_gpt2s(trained: ByteLevelBPETokenizer) -> None:
    """Bytes 0..255 in GPT-2's order, then one token per merge, then <|endoftext|> last."""
    assert [trained.id_to_token(i) for i in range(256)] == list(BYTE_SYMBOLS)
    merges = trained.merges
    assert trained.vocab_size == 256 + len(merges) + 1 <= 400
    assert [trained.token_to_id(a + b) for a, b in merges] == list(range(256, 256 + len(merges)))
    assert trained.eos_id == trained.pad_id == trained.vocab_size - 1
    assert trained.id_to_token(trained.eos_id) == EOS_TOKEN
    assert trained.encode(EOS_TOKEN) == [trained.eos_id]
    assert trained.token_to_id("Ġfox") is not None and len(trained.encode(" the fox")) == 2


def test_train_is_deterministic(trained: ByteLevelBPETokenizer, tmp_path: Path) -> None:
    """Two trainings (and one on the reversed corpus) give byte-identical files."""
    runs = [trained, ByteLevelBPETokenizer.train(CORPUS, vocab_size=400, model_max_length=64),
            ByteLevelBPETokenizer.train(iter(CORPUS[::-1]), vocab_size=400, model_max_length=64)]
    assert len({run.to_json() for run in runs}) == 1
    files = []
    for i, run in enumerate(runs):
        out = run.save(tmp_path / str(i))
        files.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert files[0] == files[1] == files[2]


def test_trained_round_trip_and_no_unknown(trained: ByteLevelBPETokenizer) -> None:
    for text, ids in zip(SAMPLES, trained.encode_batch(SAMPLES)):
        assert trained.decode(ids) == text
        assert ids == trained.encode(text)
    assert trained.decode([trained.eos_id], skip_special_tokens=True) == ""


def test_train_rejects_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="iterable of strings"):
        ByteLevelBPETokenizer.train("one string, not a corpus", vocab_size=300)
    with pytest.raises(ConfigError, match="vocab_size=256"):
        ByteLevelBPETokenizer.train(CORPUS, vocab_size=256)
    with pytest.raises(ConfigError, match="min_frequency"):
        ByteLevelBPETokenizer.train(CORPUS, vocab_size=300, min_frequency=-1)
    with pytest.raises(DataError, match="empty"):
        ByteLevelBPETokenizer.train(["", ""], vocab_size=300)  # (a literal eos is text, not empty)


@pytest.mark.parametrize("add_prefix_space", [False, True])
def test_save_load_from_json_identical(add_prefix_space: bool, tmp_path: Path) -> None:
    tok = ByteLevelBPETokenizer.train(CORPUS, vocab_size=350, add_prefix_space=add_prefix_space)
    out = tok.save(tmp_path / "tok")
    assert {p.name for p in out.iterdir()} == {
        "vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
        "special_tokens_map.json"}
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "GPT2Tokenizer"
    assert config["add_prefix_space"] is add_prefix_space
    expected = tok.encode_batch(SAMPLES)
    for name in ("tokenizer.json", None):  # with tokenizer.json, then vocab.json + merges.txt
        if name:
            (out / name).unlink()
        other = ByteLevelBPETokenizer.load(out)
        assert other.settings == tok.settings and other.merges == tok.merges
        _first_difference("reloaded", SAMPLES, other.encode_batch(SAMPLES), expected)
    worker = ByteLevelBPETokenizer.from_json(tok.to_json())
    assert worker.settings == tok.settings and worker.to_json() == tok.to_json()
    _first_difference("from_json", SAMPLES, worker.encode_batch(SAMPLES), expected)
    plain = ByteLevelBPETokenizer.from_json(tok.backend.to_str())  # a bare tokenizer.json
    _first_difference("from a tokenizer.json string", SAMPLES, plain.encode_batch(SAMPLES), expected)


def test_prepare_corpus_with_bpe(tmp_path: Path) -> None:
    """The corpus pipeline takes the tokenizer (workers rebuild it with from_json)."""
    tok = ByteLevelBPETokenizer.train(CORPUS, vocab_size=350, add_prefix_space=True)
    src = tmp_path / "in" / "plain.txt"
    src.parent.mkdir()
    src.write_text("Café au lait. The fox jumps! 北京大学。\n\nSecond paragraph here.\n"
                   "\nA new line, emoji 🙂.\n", encoding="utf-8")
    sentences = [s for doc in iter_documents([src]) for p in doc.paragraphs
                 for s in split_sentences(p)]
    expected = [t for ids in tok.encode_batch(sentences) for t in ids]
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        prepare_corpus([src], tok, out, workers=workers, progress=False)
        corpus = TokenCorpus(out)
        assert corpus.tokens.dtype == np.uint16 and corpus.vocab_size == tok.vocab_size
        assert corpus.tokens.tolist() == expected
        assert tok.decode(corpus.sentence(0).tolist()) == " " + sentences[0]


LITERAL_EOS = "Our markup uses <|endoftext|> between stories.<|endoftext|>It is text here."


def test_training_reads_a_literal_eos_as_text() -> None:
    """Training texts are corpus text: the characters of ``<|endoftext|>`` count like any
    others (GPT-2's regex cuts them into "<|", "endoftext", "|>", so no merge can rebuild the
    special token), and eos stays the one id after the merges."""
    tok = ByteLevelBPETokenizer.train([LITERAL_EOS] * 20, vocab_size=300)
    assert ("<", "|") in tok.merges and tok.token_to_id("endoftext") is not None
    assert tok.eos_id == tok.vocab_size - 1 and tok.id_to_token(tok.eos_id) == EOS_TOKEN


@pytest.mark.parametrize("workers", [1, 2])
def test_prepared_corpus_reads_a_literal_eos_as_text(tmp_path: Path, workers: int) -> None:
    """``<|endoftext|>`` written in a corpus is text: no false document end in the shards
    (while :meth:`encode`, for prompts that mean it, still gives eos)."""
    gpt2 = ByteLevelBPETokenizer.load(_require(_data_root() / "vocab" / "gpt2")).with_prefix_space(True)
    src = tmp_path / "raw.txt"
    src.write_text(LITERAL_EOS + "\n", encoding="utf-8")
    prepare_corpus([src], gpt2, tmp_path / "out", workers=workers, progress=False)
    corpus = TokenCorpus(tmp_path / "out")
    assert gpt2.eos_id not in corpus.tokens.tolist()
    assert gpt2.decode(corpus.document_tokens(0).tolist()) == " " + " ".join(split_sentences(LITERAL_EOS))
    assert gpt2.encode("a<|endoftext|>")[-1] == gpt2.eos_id


# ---------------------------------------------------------------------------- 2. by hand
# GPT-2's byte order: printable ASCII first ("!" = 0, so "h" = ord("h") - 33 = 71), then
# bytes 161..172 and 174..255, then the other 68 bytes (space → "Ġ" = 220, "\n" → "Ċ" = 198).
H, E, L, O, R, D, SPACE, NEWLINE = 71, 68, 75, 78, 81, 67, 220, 198
HAND_MERGES = ["h e", "l l", "he ll", "hell o", "Ġ w", "e l"]  # ids 256..261, eos 262


@pytest.fixture
def hand(tmp_path: Path) -> ByteLevelBPETokenizer:
    vocab = {symbol: i for i, symbol in enumerate(BYTE_SYMBOLS)}
    for merge in HAND_MERGES:
        vocab[merge.replace(" ", "")] = len(vocab)
    vocab[EOS_TOKEN] = len(vocab)
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(HAND_MERGES) + "\n")
    return ByteLevelBPETokenizer.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt")


@pytest.mark.parametrize("text, ids", [
    ("hello", [259]),                  # h e → he; l l → ll; he ll → hell; hell o → hello
    ("helo", [256, L, O]),             # "h e" (rank 0) uses the e before "e l" (rank 5) can
    ("elle", [E, 257, E]),             # "l l" (rank 1) beats "e l" (rank 5)
    ("el", [261]),
    (" wello", [260, E, 257, O]),      # ll first, then Ġw; "e ll" is no merge
    ("hello world", [259, 260, O, R, L, D]),  # pre-tokens "hello" and " world"
    ("h\n", [H, NEWLINE]), ("  ", [SPACE, SPACE]),
    ("é", [127, 102]),                 # UTF-8 C3 A9 → "Ã" (127) "©" (102), as in GPT-2
    (f"hello{EOS_TOKEN}", [259, 262]),
])
def test_hand_computed_ids(hand: ByteLevelBPETokenizer, text: str, ids: list[int]) -> None:
    assert hand.encode(text) == ids
    assert hand.decode(ids) == text
    assert (hand.vocab_size, hand.eos_id) == (263, 262)


def test_hand_computed_offsets_and_prefix_space(hand: ByteLevelBPETokenizer, tmp_path: Path) -> None:
    [(ids, offsets)] = hand.encode_with_offsets(["hello world"])
    assert offsets == [(0, 5), (5, 7), (7, 8), (8, 9), (9, 10), (10, 11)]  # Ġw covers the space
    [(_, offsets)] = hand.encode_with_offsets(["é!"])
    assert offsets == [(0, 1), (0, 1), (1, 2)]  # both byte tokens of é map to its character
    spaced = ByteLevelBPETokenizer.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt",
                                              add_prefix_space=True)
    assert spaced.encode("world") == [260, O, R, L, D] == spaced.encode(" world")
    assert spaced.decode(spaced.encode("world")) == " world"
    assert spaced.encode_with_offsets(["world"])[0][1][0] == (0, 1)  # inside the original


# ---------------------------------------------------------------------------- 3. parity
@pytest.fixture(scope="module")
def gpt2_dir() -> Path:
    directory = _data_root() / "vocab" / "gpt2"
    _require(directory / "vocab.json")
    return _require(directory / "merges.txt").parent


@pytest.fixture(scope="module")
def gpt2(gpt2_dir: Path) -> ByteLevelBPETokenizer:
    return ByteLevelBPETokenizer.load(gpt2_dir)


def _oracle(gpt2_dir: Path, add_prefix_space: bool = False) -> Any:
    """transformers' GPT2TokenizerFast on GPT-2's files, checked to have really read them.

    transformers 5.x ignores ``vocab_file=``/``merges_file=`` (it builds an empty vocabulary);
    its ``vocab=``/``merges=`` take the paths. Try the 4.x form first, then the 5.x one.
    """
    transformers = pytest.importorskip("transformers")
    files = {"vocab": str(gpt2_dir / "vocab.json"), "merges": str(gpt2_dir / "merges.txt")}
    hf = transformers.GPT2TokenizerFast(vocab_file=files["vocab"], merges_file=files["merges"],
                                        add_prefix_space=add_prefix_space)
    if len(hf) != 50257:
        hf = transformers.GPT2TokenizerFast(**files, add_prefix_space=add_prefix_space)
    assert len(hf) == 50257, "oracle did not load GPT-2's vocabulary"
    assert hf("Hello world")["input_ids"] == ([18435, 995] if add_prefix_space else [15496, 995])
    return hf


def _english_sample(root: Path) -> list[str]:
    """About 2,000 lines from English files of every kind (CRLF lines keep their ``\\r``)."""
    books = sorted((root / "english-corpus" / "books").glob("*.txt"))
    texts = [line for book in _spread(books, 6) for line in _lines(book, 120)]
    for part, n in (("english-corpus/wiki/AA_wiki_00.txt", 300),
                    ("english-corpus/tinyshakespeare/input.txt", 100),
                    ("wikitext-2-raw/wiki.test.raw", 200), ("glue/SST-2/stsa.binary.dev", 150),
                    ("conll2003/eng.testa", 150), ("hellaswag/hellaswag_val_full.txt", 150),
                    ("glue/MRPC/dev.tsv", 100), ("xnli/dev-en.tsv", 100)):
        texts += _lines(root / part, n)
    texts += _squad_like(root / "squad" / "dev-v1.1.json", 200)
    texts += _csv_fields(root / "youtube-spam" / "Youtube01-Psy.csv", 100)
    return texts + _lines(root / "sentiment" / "mr" / "rt-polarity.pos", 100, "cp1252")


def test_oracle_ids_and_offsets(gpt2: ByteLevelBPETokenizer, gpt2_dir: Path) -> None:
    hf = _oracle(gpt2_dir)
    texts = _english_sample(_data_root()) + SAMPLES
    assert len(texts) > 2000
    theirs = hf(texts, add_special_tokens=False, return_offsets_mapping=True)
    _first_difference("ids", texts, gpt2.encode_batch(texts), theirs["input_ids"])
    ours = gpt2.encode_with_offsets(texts)
    _first_difference("offsets", texts, [[tuple(o) for o in offs] for _, offs in ours],
                      [[tuple(o) for o in offs] for offs in theirs["offset_mapping"]])
    few = texts[::20]
    _first_difference("encode vs encode_batch", few, [gpt2.encode(t) for t in few],
                      gpt2.encode_batch(few))
    ids = theirs["input_ids"][::10]
    _first_difference("decode", ids, [gpt2.decode(i) for i in ids], [hf.decode(i) for i in ids])
    assert (gpt2.vocab_size, gpt2.eos_id, gpt2.pad_id) == (50257, 50256, 50256)


def test_oracle_with_prefix_space(gpt2_dir: Path) -> None:
    hf = _oracle(gpt2_dir, add_prefix_space=True)
    ours = ByteLevelBPETokenizer.from_files(gpt2_dir / "vocab.json", gpt2_dir / "merges.txt",
                                            add_prefix_space=True)
    texts = _english_sample(_data_root())[::4] + SAMPLES
    _first_difference("ids with add_prefix_space", texts, ours.encode_batch(texts),
                      hf(texts, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("which", ["gpt2", "trained-prefix-space"])
@pytest.mark.parametrize("loader", ["GPT2TokenizerFast", "AutoTokenizer"])
def test_saved_directory_loads_in_transformers(which: str, loader: str, gpt2: ByteLevelBPETokenizer,
                                               tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    if which == "gpt2":
        tok = ByteLevelBPETokenizer.from_json(gpt2.to_json())
    else:
        tok = ByteLevelBPETokenizer.train(CORPUS, vocab_size=350, add_prefix_space=True,
                                          model_max_length=128)
    hf = getattr(transformers, loader).from_pretrained(str(tok.save(tmp_path)))
    assert (hf.eos_token_id, hf.pad_token_id, len(hf)) == (tok.eos_id, tok.pad_id, tok.vocab_size)
    texts = SAMPLES + CORPUS[:5]
    ids = hf(texts, add_special_tokens=False)["input_ids"]
    _first_difference("transformers on our directory", texts, ids, tok.encode_batch(texts))
    _first_difference("its decode", texts, [hf.decode(i) for i in ids], [tok.decode(i) for i in ids])


# ---------------------------------------------------------------------------- 4. lossless
FAMILIES = {  # family → (globs under the data directory, lines per file, encoding)
    "books": (["english-corpus/books/*.txt"], 30, "utf-8"),
    "wiki": (["english-corpus/wiki/*.txt"], 60, "utf-8"),
    "shakespeare+wikitext": (["english-corpus/tinyshakespeare/input.txt",
                              "wikitext-2-raw/wiki.test.raw"], 300, "utf-8"),
    "glue+squad": (["glue/*/*.tsv", "glue/SST-2/*", "glue/MRPC/*.txt"], 60, "utf-8"),
    "conll2003": (["conll2003/eng.*"], 200, "utf-8"),
    "hellaswag": (["hellaswag/*.txt"], 300, "utf-8"),
    "mr (cp1252)": (["sentiment/mr/rt-polarity.*"], 200, "cp1252"),
    "youtube-spam": (["youtube-spam/*.csv"], 100, "utf-8"),
    "chinese": (["chinese/*/*.tsv", "chinese/*/*.txt"], 200, "utf-8"),
    "xnli": (["xnli/dev-*.tsv"], 200, "utf-8"),
    "paws-x": (["paws-x/dev-*.tsv"], 200, "utf-8"),
}
SQUAD_LIKE = {"glue+squad": "squad/dev-v1.1.json", "chinese": "chinese/cmrc2018/dev.json"}


def _family_texts(root: Path, family: str) -> list[str]:
    patterns, n, encoding = FAMILIES[family]
    files = sorted({path for pattern in patterns for path in root.glob(pattern)})
    if not files:
        pytest.skip(f"no {patterns} under {root}")
    texts = [line for path in files for line in _lines(path, n, encoding)]
    if family in SQUAD_LIKE:
        texts += _squad_like(root / SQUAD_LIKE[family], 300)
    return texts


def test_round_trip_awkward_strings(gpt2: ByteLevelBPETokenizer, gpt2_dir: Path) -> None:
    spaced = ByteLevelBPETokenizer.from_files(gpt2_dir / "vocab.json", gpt2_dir / "merges.txt",
                                              add_prefix_space=True)
    for text in SAMPLES:
        assert gpt2.decode(gpt2.encode(text)) == text
        assert gpt2.decode(gpt2.encode(text), skip_special_tokens=True) == text.replace(EOS_TOKEN, "")
        if EOS_TOKEN not in text:  # (each piece after an <|endoftext|> gets its own space)
            spaced_text = text if text.startswith(" ") or not text else " " + text
            assert spaced.decode(spaced.encode(text)) == spaced_text
    [(ids, offsets)] = gpt2.encode_with_offsets(["  two\r\n\tthree 🙂 北京"])
    assert len(ids) == len(offsets) and all(0 <= a <= b <= 18 for a, b in offsets)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_round_trip_shared_texts(family: str, gpt2: ByteLevelBPETokenizer) -> None:
    texts = _family_texts(_data_root(), family)
    decoded = [gpt2.decode(ids) for ids in gpt2.encode_batch(texts)]
    _first_difference(f"{family}: decode(encode(text))", texts, decoded, texts)


# ---------------------------------------------------------------------------- 5. errors
def _write_files(directory: Path, vocab: Any, merges: str) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    vocab_path, merges_path = directory / "vocab.json", directory / "merges.txt"
    vocab_path.write_text(vocab if isinstance(vocab, str) else json.dumps(vocab), encoding="utf-8")
    merges_path.write_text(merges, encoding="utf-8")
    return vocab_path, merges_path


def _byte_vocab(*extra: str) -> dict[str, int]:
    vocab = {symbol: i for i, symbol in enumerate(BYTE_SYMBOLS)}
    for token in (*extra, EOS_TOKEN):
        vocab[token] = len(vocab)
    return vocab


@pytest.mark.parametrize("merges, line, message", [
    ("#version: 0.2\nh e\nh e l\n", 3, "two symbols"),
    ("#version: 0.2\nh e\n\nl l\n", 3, "two symbols"),
    ("h e\nhello\n", 2, "two symbols"),
    ("h e\nx  y\n", 2, "two symbols"),
    ("#version: 0.2\nh e\nhe Ω\n", 3, "'Ω'"),         # a symbol not in the vocabulary
    ("#version: 0.2\nh e\nl l\n", 3, "'ll'"),        # the merged token is not in it
])
def test_malformed_merges_name_file_and_line(tmp_path: Path, merges: str, line: int, message: str) -> None:
    vocab_path, merges_path = _write_files(tmp_path, _byte_vocab("he"), merges)
    with pytest.raises(DataError, match=message) as info:
        ByteLevelBPETokenizer.from_files(vocab_path, merges_path)
    assert f"{merges_path}:{line}:" in str(info.value) and info.value.line == line


@pytest.mark.parametrize("vocab, message", [
    ("{not json", "invalid JSON"),
    ("[1, 2]", "JSON object"),
    ({}, "empty"),
    ({"a": 0}, "byte symbols"),
    ({**_byte_vocab(), "he": "7"}, "not an integer"),
    ({**_byte_vocab(), "he": 3}, "same id"),
    ({s: i for i, s in enumerate(BYTE_SYMBOLS)}, r"special token.*endoftext"),
])
def test_malformed_vocab_names_file(tmp_path: Path, vocab: Any, message: str) -> None:
    vocab_path, merges_path = _write_files(tmp_path, vocab, "#version: 0.2\n")
    with pytest.raises(DataError, match=message) as info:
        ByteLevelBPETokenizer.from_files(vocab_path, merges_path)
    assert str(vocab_path) in str(info.value)


def test_missing_and_undecodable_files(tmp_path: Path) -> None:
    vocab_path, merges_path = _write_files(tmp_path, _byte_vocab(), "#version: 0.2\n")
    with pytest.raises(DataError, match="cannot read") as info:
        ByteLevelBPETokenizer.from_files(tmp_path / "nope.json", merges_path)
    assert "nope.json" in str(info.value)
    with pytest.raises(DataError, match="cannot read merges file") as info:
        ByteLevelBPETokenizer.from_files(vocab_path, tmp_path / "nope.txt")
    merges_path.write_bytes(b"#version: 0.2\n\xff\xfe a\n")
    with pytest.raises(DataError, match="not valid UTF-8") as info:
        ByteLevelBPETokenizer.from_files(vocab_path, merges_path)
    assert str(merges_path) in str(info.value)


def test_bad_directories_and_json(tmp_path: Path, trained: ByteLevelBPETokenizer) -> None:
    with pytest.raises(DataError, match="not found"):
        ByteLevelBPETokenizer.load(tmp_path / "missing")
    with pytest.raises(DataError, match="neither"):
        ByteLevelBPETokenizer.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece"}}))
    with pytest.raises(DataError, match="not hold a BPE model") as info:
        ByteLevelBPETokenizer.load(tmp_path)
    assert "tokenizer.json" in str(info.value)
    with pytest.raises(DataError, match="invalid JSON"):
        ByteLevelBPETokenizer.from_json("{nope")
    broken = json.loads(trained.to_json())
    del broken["settings"]
    with pytest.raises(DataError, match="malformed"):
        ByteLevelBPETokenizer.from_json(json.dumps(broken))
    data = json.loads(trained.backend.to_str())
    data["model"]["merges"][3] = ["Ġ", "Ω"]
    with pytest.raises(DataError, match="merge #3"):
        ByteLevelBPETokenizer.from_json(json.dumps(data))


def test_settings_from_hf_config() -> None:
    assert ByteLevelBPESettings.from_hf_config({}) == ByteLevelBPESettings()
    config = {"add_prefix_space": True, "model_max_length": 1024,
              "eos_token": {"content": EOS_TOKEN}, "pad_token": None}
    assert ByteLevelBPESettings.from_hf_config(config) == ByteLevelBPESettings(True, 1024)
    from_pre_tokenizer = ByteLevelBPESettings.from_hf_config(
        {"model_max_length": int(1e30)}, {"type": "ByteLevel", "add_prefix_space": True})
    assert from_pre_tokenizer == ByteLevelBPESettings(add_prefix_space=True)


# ---------------------------------------------------------------------------- docs
def test_module_usage_example_runs() -> None:
    import muppets.tokenizers.bpe as module

    _require(_data_root() / "vocab" / "gpt2" / "merges.txt")
    code = textwrap.dedent(module.__doc__.split("Usage::", 1)[1])
    exec(compile(code, "bpe.py usage example", "exec"), {})


def test_with_prefix_space_copies_vocabulary_and_switches_the_space():
    gpt2 = ByteLevelBPETokenizer.load("data:vocab/gpt2")
    spaced = gpt2.with_prefix_space(True)
    assert spaced.add_prefix_space and not gpt2.add_prefix_space
    assert gpt2.encode("Hello world") == [15496, 995] and spaced.encode("Hello world") == [18435, 995]
    assert ByteLevelBPETokenizer.from_json(spaced.to_json()).encode("Hello") == [18435]
    assert spaced.with_prefix_space(False).encode("Hello world") == [15496, 995]
