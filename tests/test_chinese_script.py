"""Converting Chinese text to one script before tokenization (``chinese_script``).

Tiers: the converter against OpenCC on the real zhwiki text (length kept, idempotent); invariance:
a Traditional text through a converting tokenizer gives the ids, offsets, CMRC answer spans and
prepared corpus (tokens and masking units) of its Simplified form through a plain one; the
setting survives save/load/to_json and transformers still loads the directory; typed errors.
"""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import json
from pathlib import Path

import numpy as np
import pytest

from muppets.data.shards import TokenCorpus
from muppets.data.prepare import prepare_corpus
from muppets.data.units import UnitSpec
from muppets.errors import ConfigError, DataError
from muppets.paths import data_dir
from muppets.tasks import load_task
from muppets.tokenizers.script import script_converter
from muppets.tokenizers.wordpiece import SCRIPT_KEY, WordPieceTokenizer
from muppets.transfer.features import FeatureOptions, span_features

opencc = pytest.importorskip("opencc")  # the optional `chinese` extra
jieba = pytest.importorskip("jieba")

VOCAB = data_dir() / "vocab" / "bert-base-chinese" / "vocab.txt"
ZHWIKI = data_dir() / "chinese" / "corpus"


def zhwiki_lines(n: int = 3000) -> list[str]:
    """The first ``n`` non-empty lines of the first zhwiki shard (mixed scripts)."""
    first = sorted(ZHWIKI.glob("zhwiki_*.txt"))[0]
    lines = []
    with first.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                lines.append(line.rstrip("\n"))
            if len(lines) == n:
                break
    return lines


@pytest.fixture(scope="module")
def plain() -> WordPieceTokenizer:
    return WordPieceTokenizer.from_vocab(VOCAB)


@pytest.fixture(scope="module")
def simplified() -> WordPieceTokenizer:
    return WordPieceTokenizer.from_vocab(VOCAB, chinese_script="simplified")


def test_opencc_tables_map_every_entry_to_one_of_the_same_length(tmp_path) -> None:
    """What keeps each character in place: every phrase and character rule that t2s and s2tw use
    maps a string to one of its own length (the tables dumped with OpenCC's own ``opencc_dict``)."""
    import subprocess

    from muppets.tokenizers.script import _OPENCC, _opencc

    clib = Path(opencc.__file__).parent / "clib"
    tool = clib / "bin" / "opencc_dict"
    if not tool.is_file():
        pytest.skip("this OpenCC package ships no opencc_dict")
    env = {"LD_LIBRARY_PATH": str(clib / "lib64")}
    checked = {}
    for script in _OPENCC:
        config_path = Path(_opencc(script).config)
        config = json.loads(config_path.read_text())
        for name in (f for step in config["conversion_chain"] for f in _dict_files(step["dict"])):
            dump = tmp_path / f"{name}.txt"
            subprocess.run([str(tool), "-i", str(config_path.parent / name), "-o", str(dump), "-f", "ocd2",
                            "-t", "text"], check=True, env=env, capture_output=True)
            lines = dump.read_text(encoding="utf-8").splitlines()
            for line in lines:
                key, values = line.split("\t")
                assert len(values.split(" ")[0]) == len(key), (name, line)
            checked[name] = len(lines)
    assert {"TSPhrases.ocd2", "TSCharacters.ocd2", "STPhrases.ocd2", "STCharacters.ocd2", "TWVariants.ocd2"} <= set(checked)
    assert sum(checked.values()) > 10_000, checked


def _dict_files(spec: dict) -> list[str]:
    if spec.get("type") == "group":
        return [f for d in spec["dicts"] for f in _dict_files(d)]
    return [spec["file"]]


def test_converter_keeps_length_and_converts_traditional_text() -> None:
    to_s, to_t = script_converter("simplified"), script_converter("traditional")
    assert script_converter("") is None
    lines = zhwiki_lines()
    changed = 0
    for line in lines:
        out = to_s(line)
        assert len(out) == len(line)
        changed += out != line
        assert all(a == b for a, b in zip(line, out) if not ("\u3400" <= a <= "\u9fff"))  # only ideographs change
    assert changed > len(lines) // 10, changed  # zhwiki mixes scripts: many lines hold Traditional
    assert to_s("這個國家的頭髮") == "这个国家的头发" and to_t("这个国家的头发") == "這個國家的頭髮"
    assert to_s("乾隆皇帝") == "乾隆皇帝"  # OpenCC's phrase table, not the character 乾 → 干
    assert to_s("abc, Ünïcode 123") == "abc, Ünïcode 123"


def test_traditional_text_tokenizes_as_its_simplified_form(plain, simplified) -> None:
    lines = zhwiki_lines(1000)
    to_s = script_converter("simplified")
    assert simplified.encode_batch(lines) == plain.encode_batch([to_s(x) for x in lines])
    assert simplified.encode_text_batch(lines) == plain.encode_text_batch([to_s(x) for x in lines])
    mixed = [x for x in lines if to_s(x) != x]
    assert plain.encode_batch(mixed) != simplified.encode_batch(mixed)  # the setting does something
    checked = 0
    for line, (ids, offsets) in zip(mixed[:200], simplified.encode_with_offsets(mixed[:200])):
        whole = to_s(line)  # converted once, as the tokenizer does
        for token, (a, b) in zip(ids, offsets):  # offsets point into the text as given, at the same characters
            piece = simplified.id_to_token(token).removeprefix("##")
            if b - a == 1 and "\u4e00" <= line[a] <= "\u9fff" and piece != "[UNK]":
                assert whole[a] == piece, (line, a)
                checked += line[a] != piece
    assert checked > 100, checked  # Traditional characters read at their own offsets
    pair = simplified.encode_for_model("這是問題", "這是答案")
    assert pair == plain.encode_for_model("这是问题", "这是答案")
    words = [["這", "個"], ["國", "家", "abc"], ["乾", "隆"]]
    expected = plain.encode_words([["这", "个"], ["国", "家", "abc"], ["乾", "隆"]])  # 乾 stays in 乾隆, not 干
    assert [e.ids for e in simplified.encode_words(words)] == [e.ids for e in expected]
    traditional = WordPieceTokenizer.from_vocab(VOCAB, chinese_script="traditional")
    by_word = traditional.encode_words([["头", "发"], list("乾隆皇帝的头发")])  # each sentence converted whole
    assert [e.ids for e in by_word] == traditional.encode_batch(["头发", "乾隆皇帝的头发"])
    assert by_word[0].ids == plain.encode("頭髮")


def test_setting_survives_save_load_json_and_transformers_loads_the_directory(simplified, tmp_path) -> None:
    simplified.save(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())[SCRIPT_KEY] == "simplified"
    again = WordPieceTokenizer.load(tmp_path)
    assert again.settings.chinese_script == "simplified" and again.encode("頭髮") == simplified.encode("头发")
    assert WordPieceTokenizer.from_json(simplified.to_json()).encode("頭髮") == simplified.encode("头发")
    plain = WordPieceTokenizer.from_vocab(VOCAB)
    settings = json.loads(plain.to_json())["settings"]  # unchanged fingerprint for corpora prepared before
    assert sorted(settings) == ["cls_token", "lowercase", "mask_token", "model_max_length", "pad_token", "sep_token",
                                "strip_accents", "tokenize_chinese_chars", "unk_token"]
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))  # ignores the key: reads text as written
    assert hf("头发")["input_ids"][1:-1] == simplified.encode("頭髮")


def test_bad_scripts_are_typed_errors(simplified, tmp_path) -> None:
    with pytest.raises(ConfigError, match="chinese_script='hanzi'"):
        WordPieceTokenizer.from_vocab(VOCAB, chinese_script="hanzi")
    simplified.save(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, SCRIPT_KEY: "hant"}))
    with pytest.raises(DataError, match=SCRIPT_KEY) as err:
        WordPieceTokenizer.load(tmp_path)
    assert "tokenizer_config.json" in str(err.value) and "hant" in str(err.value)
    assert simplified.with_chinese_script("") is simplified  # unset keeps the tokenizer's own
    with pytest.raises(ConfigError, match="converts to simplified"):
        simplified.with_chinese_script("traditional", tmp_path)


def test_cmrc_answer_spans_of_a_traditional_context(plain, simplified) -> None:
    examples = load_task("cmrc2018")["dev"][:150]
    to_t = script_converter("traditional")
    traditional = [dataclasses.replace(ex, context=to_t(ex.context), question=to_t(ex.question)) for ex in examples]
    options = FeatureOptions(max_seq_len=256, doc_stride=128)
    ours, theirs = span_features(traditional, simplified, options), span_features(examples, plain, options)
    unconverted = span_features(traditional, plain, options)
    assert len(ours) == len(theirs) == len(unconverted)
    differs = sum(a.input_ids != b.input_ids for a, b in zip(ours, theirs))  # s2tw then t2s is not always the original
    for a, b in zip(ours, theirs):
        assert a.label == b.label and a.offsets == b.offsets  # same windows, same answer tokens
    assert differs < len(ours) // 10, differs
    assert sum(a.input_ids != b.input_ids for a, b in zip(unconverted, theirs)) > len(ours) // 2  # the setting matters


def test_prepared_corpus_of_traditional_text_equals_its_simplified_one(plain, simplified, tmp_path) -> None:
    from test_masking_levels import ENTITIES, chinese_documents

    to_t, to_s = script_converter("traditional"), script_converter("simplified")
    text = chinese_documents()
    assert to_s(to_t(text)) == text  # this text comes back exactly, so the two corpora must agree
    for name, body, entities in (("s", text, ENTITIES), ("t", to_t(text), [to_t(e) for e in ENTITIES])):
        (tmp_path / name / "raw").mkdir(parents=True)
        (tmp_path / name / "raw" / "docs.txt").write_text(body, encoding="utf-8")
        (tmp_path / name / "entities.txt").write_text("".join(f"{e}\n" for e in entities), encoding="utf-8")
    runs = {}
    for name, tok, workers in (("s", plain, 1), ("t", simplified, 1), ("t", simplified, 2)):
        out = tmp_path / f"{name}-{workers}"
        prepare_corpus([tmp_path / name / "raw"], tok, out, workers=workers, batch_docs=8, progress=False,
                       units=UnitSpec("jieba", str(tmp_path / name / "entities.txt")))
        runs[(name, workers)] = TokenCorpus(out)
    reference = runs[("s", 1)]
    for key in (("t", 1), ("t", 2)):
        assert np.array_equal(runs[key].tokens, reference.tokens), key
        assert np.array_equal(runs[key].units, reference.units), key  # jieba and the lexicon saw Simplified


def test_docstring_examples_run() -> None:
    module = importlib.import_module("muppets.tokenizers.script")
    assert doctest.testmod(module).failed == 0


def test_pretrain_config_and_cli_set_the_script(tmp_path) -> None:
    from muppets import cli
    from muppets.recipes import bert_pretrain

    cfg = bert_pretrain.load_config(None, [f"tokenizer.path={VOCAB}", "tokenizer.chinese_script=simplified"])
    tok = bert_pretrain.ensure_tokenizer(cfg, tmp_path / "run")
    assert tok.settings.chinese_script == "simplified" and tok.encode("頭髮") == tok.encode("头发")
    bad = bert_pretrain.load_config(None, [f"tokenizer.path={VOCAB}", "tokenizer.chinese_script=kanji"])
    with pytest.raises(ConfigError, match="tokenizer.chinese_script='kanji'"):
        bert_pretrain.ensure_tokenizer(bad, tmp_path / "bad")
    (tmp_path / "raw.txt").write_text("這個國家的頭髮很長。\n\n这个国家的头发很长。\n" * 20, encoding="utf-8")
    assert cli.main(["tokenizer", "train", "--input", str(tmp_path / "raw.txt"), "--out", str(tmp_path / "tok"),
                     "--vocab-size", "200", "--min-frequency", "1", "--chinese-script", "simplified"]) == 0
    trained = WordPieceTokenizer.load(tmp_path / "tok")
    assert trained.settings.chinese_script == "simplified"
    assert trained.token_to_id("這") is None and trained.token_to_id("这") is not None  # trained on converted text
