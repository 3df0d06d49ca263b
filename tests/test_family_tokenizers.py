"""Parity tier: every family's tokenizer, built by the ``tokenizers`` library inside the test
(byte-level BPE for RoBERTa, Unigram for XLM-R, WordPiece for DistilBERT / ELECTRA), gives the
ids, pair template, special tokens and offsets of ``transformers.AutoTokenizer`` (fast) on real
XNLI lines in English, Chinese, German, French and Spanish (``../shared/data/xnli``)."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

transformers = pytest.importorskip("transformers")

from muppets import families  # noqa: E402
from muppets.paths import data_dir  # noqa: E402

LANGS = ("en", "zh", "de", "fr", "es")
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def _lines() -> list[tuple[str, str]]:
    out = []
    for lang in LANGS:
        rows = (data_dir() / "xnli" / f"dev-{lang}.tsv").read_text(encoding="utf-8").splitlines()
        out += [tuple(r.split("\t")[:2]) for r in rows[:40:4]]
    return out


PAIRS = _lines()
TEXTS = [a for a, _ in PAIRS] + [b for _, b in PAIRS]


def _byte_bpe() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TEXTS[::2], trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True,
                                                      add_prefix_space=False)
    return tok


def _unigram_directory(directory) -> None:
    """A SentencePiece-style Unigram vocabulary trained by ``tokenizers``, written by
    transformers' XLMRobertaTokenizer as a hub directory is (its pipeline around the vocabulary)."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=SPECIALS, unk_token="<unk>")
    tok.train_from_iterator(TEXTS[::2], trainer)
    vocab = [tuple(v) for v in json.loads(tok.to_str())["model"]["vocab"]]
    transformers.XLMRobertaTokenizer(vocab=vocab).save_pretrained(directory)
    (directory / "config.json").write_text(json.dumps({"model_type": "xlm-roberta"}))


def _write(tok: Tokenizer, directory, tokenizer_class: str, model_type: str) -> None:
    directory.mkdir()
    tok.save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": tokenizer_class, "bos_token": "<s>", "eos_token": "</s>", "cls_token": "<s>",
              "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    (directory / "config.json").write_text(json.dumps({"model_type": model_type}))


@pytest.fixture(scope="module", params=["roberta", "xlm-roberta", "distilbert", "electra"])
def tok_dir(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp("tok") / request.param
    if request.param == "roberta":
        _write(_byte_bpe(), directory, "RobertaTokenizer", "roberta")
    elif request.param == "xlm-roberta":
        _unigram_directory(directory)
    else:
        from muppets.tokenizers.wordpiece import WordPieceTokenizer

        WordPieceTokenizer.train(TEXTS, vocab_size=300, lowercase=True).save(directory)
        cls = {"distilbert": "DistilBertTokenizer", "electra": "ElectraTokenizer"}[request.param]
        config = json.loads((directory / "tokenizer_config.json").read_text())
        (directory / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": cls}))
        (directory / "config.json").write_text(json.dumps({"model_type": request.param}))
    return request.param, directory


def test_ids_and_offsets_equal_autotokenizer(tok_dir):
    name, directory = tok_dir
    ours = families.of_directory(directory).tokenizer(directory)
    theirs = transformers.AutoTokenizer.from_pretrained(directory)
    assert theirs.is_fast
    want = theirs(TEXTS, add_special_tokens=False, return_offsets_mapping=True)
    for text, ids, offsets, enc in zip(TEXTS, want["input_ids"], want["offset_mapping"], ours.encodings(TEXTS)):
        assert enc.ids == ids, text
        assert [tuple(o) for o in enc.offsets] == [tuple(o) for o in offsets], text
    assert sum(map(len, want["input_ids"])) > len(TEXTS)  # the texts were really split


def test_model_inputs_equal_autotokenizer_with_pairs_and_truncation(tok_dir):
    name, directory = tok_dir
    ours = families.of_directory(directory).tokenizer(directory)
    theirs = transformers.AutoTokenizer.from_pretrained(directory)
    firsts, seconds = [a for a, _ in PAIRS], [b for _, b in PAIRS]
    for max_length in (None, 12):
        trunc = {} if max_length is None else {"truncation": "longest_first", "max_length": max_length}
        want = theirs(firsts, seconds, **trunc)
        got = ours.encode_for_model_batch(firsts, seconds, max_length)
        assert [g["input_ids"] for g in got] == want["input_ids"]
        if "token_type_ids" in want:
            assert [g["token_type_ids"] for g in got] == want["token_type_ids"]
    single = theirs(firsts)["input_ids"]
    assert [g["input_ids"] for g in ours.encode_for_model_batch(firsts)] == single
    assert ours.cls_id == theirs.cls_token_id and ours.sep_id == theirs.sep_token_id
    assert ours.pad_id == theirs.pad_token_id and ours.mask_id == theirs.mask_token_id


def test_pair_template_has_the_familys_separators(tok_dir):
    """RoBERTa / XLM-R: ``<s> A </s></s> B </s>``; WordPiece families: ``[CLS] A [SEP] B [SEP]``."""
    name, directory = tok_dir
    ours = families.of_directory(directory).tokenizer(directory)
    ids = ours.encode_for_model("a b", "c")["input_ids"]
    sep = ours.sep_id
    assert ids[0] == ours.cls_id and ids[-1] == sep
    doubled = any(ids[i] == ids[i + 1] == sep for i in range(len(ids) - 1))
    assert doubled == (name in ("roberta", "xlm-roberta"))
    assert ids.count(sep) == (3 if doubled else 2)


def test_words_are_read_as_the_joined_text(tok_dir):
    """Pre-split words (tagging, word embeddings) get the pieces of their space-joined text."""
    name, directory = tok_dir
    ours = families.of_directory(directory).tokenizer(directory)
    words = ["Et", "il", "a", "dit", ",", "maman", "!"]
    enc = ours.encode_words([words])[0]
    assert sorted(set(enc.word_ids)) == list(range(len(words)))
    if name in ("roberta", "xlm-roberta"):
        assert enc.ids == ours.encode(" ".join(words))


def test_a_tokenizer_json_that_does_not_parse_names_the_file(tmp_path):
    from muppets.errors import DataError
    from muppets.tokenizers.hf_json import JsonTokenizer

    from muppets.tokenizers.wordpiece import WordPieceTokenizer

    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "Nonsense"}}')
    for load in (JsonTokenizer.load, WordPieceTokenizer.load):  # one message, whichever family reads it
        with pytest.raises(DataError, match=r"tokenizer.json: key 'model.type' is 'Nonsense', not a tokenizer model "
                                            r"muppets reads \(one of: BPE, Unigram, WordLevel, WordPiece\)"):
            load(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": 3}}')
    with pytest.raises(DataError, match="tokenizer.json: not a valid tokenizer.json"):
        JsonTokenizer.load(tmp_path)
