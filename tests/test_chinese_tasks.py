"""Chinese end to end: the ChnSentiCorp / MSRA NER / CMRC 2018 readers, the bert-base-chinese
vocabulary against transformers on every ChnSentiCorp and MSRA sentence, MSRA's one tag per
character through tag features and back, CMRC answers back to their exact characters, and the
CMRC 2018 metric.
"""

from __future__ import annotations

import doctest
import importlib
import json
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from muppets.errors import DataError
from muppets.metrics import cmrc_scores, compute
from muppets.paths import data_dir
from muppets.tasks import list_tasks, load_task
from muppets.tasks.chinese import CMRC_HELD_OUT, MSRA_DEV_FRACTION
from muppets.tasks.spec import TaskData
from muppets.tokenizers.wordpiece import WordPieceTokenizer
from muppets.transfer.features import FeatureOptions, merge_tag_predictions, span_features, tag_features

VOCAB = data_dir() / "vocab" / "bert-base-chinese" / "vocab.txt"


@lru_cache(maxsize=None)
def task(name: str) -> TaskData:
    return load_task(name)


@lru_cache(maxsize=None)
def chinese_tokenizer() -> WordPieceTokenizer:
    return WordPieceTokenizer.from_vocab(VOCAB, lowercase=True)  # bert-base-chinese: do_lower_case=True


def hf_chinese():
    """transformers' BertTokenizerFast on the same vocab.txt (``vocab=``: 5.x ignores ``vocab_file=``)."""
    transformers = pytest.importorskip("transformers")
    hf = transformers.BertTokenizerFast(vocab_file=str(VOCAB), do_lower_case=True)
    if len(hf) != 21128:
        hf = transformers.BertTokenizerFast(vocab=str(VOCAB), do_lower_case=True)
    assert len(hf) == 21128, "the oracle did not read the vocabulary"
    return hf


def all_texts(name: str) -> list[str]:
    data = task(name)
    if data.spec.kind == "tag":
        return ["".join(ex.tokens) for exs in data.splits.values() for ex in exs]
    return [ex.text for exs in data.splits.values() for ex in exs]


# ============================================================================ readers


def test_chinese_tasks_are_registered() -> None:
    assert {"chnsenticorp", "msra-ner", "cmrc2018"} <= set(list_tasks())


def test_chnsenticorp_counts_and_labels() -> None:
    data = task("chnsenticorp")
    assert data.sizes() == {"train": 9600, "dev": 1200, "test": 1200}  # data README §6
    counts = {s: Counter(ex.label for ex in exs) for s, exs in data.splits.items()}
    assert counts["train"] == {"1": 4799, "0": 4801} or counts["train"] == {"1": 4801, "0": 4799}
    assert sorted(counts["dev"].values()) == [593, 607] and sorted(counts["test"].values()) == [592, 608]
    assert data.spec.kind == "classify" and data.spec.labels == ["0", "1"]
    first = data["train"][0]
    assert first.text.startswith("选择珠江花园的原因就是方便") and first.source.endswith("train.tsv:2")


def test_msra_splits_hold_out_a_slice_of_the_training_file() -> None:
    data = task("msra-ner")
    assert data.sizes() == {"train": 2086, "dev": 232, "test": 4636}
    assert round(MSRA_DEV_FRACTION * 2318) == 232
    train, dev = {ex.id for ex in data["train"]}, {ex.id for ex in data["dev"]}
    assert not train & dev and all(i.startswith("dev-") for i in train | dev)  # both from dev.tsv
    assert all(ex.id.startswith("test-") for ex in data["test"])
    assert data.spec.labels == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
    assert data.spec.metric == "entity_f1" and "held out as dev (232)" in data.notes
    for exs in data.splits.values():
        for ex in exs:
            assert len(ex.tokens) == len(ex.tags) and all(len(ch) == 1 for ch in ex.tokens)
    assert load_task("msra-ner").splits["dev"][0].id == data["dev"][0].id  # deterministic


def test_msra_bad_rows_name_file_and_line(tmp_path: Path) -> None:
    folder = tmp_path / "chinese" / "msra_ner"
    folder.mkdir(parents=True)
    good = "北 京 很 好\tB-LOC I-LOC O O"
    (folder / "dev.tsv").write_text(f"text_a\tlabel\n{good}\n北 京\tB-LOC\n{good}\n", encoding="utf-8")
    (folder / "test.tsv").write_text(f"text_a\tlabel\n{good}\n北 京\tB-LOC B-FOO\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"dev\.tsv:3: 2 characters but 1 tags"):
        load_task("msra-ner", data_dir=tmp_path)
    data = load_task("msra-ner", data_dir=tmp_path, errors="skip")
    assert data.skipped == 2 and len(data["train"]) + len(data["dev"]) == 2 and len(data["test"]) == 1
    (folder / "test.tsv").write_text(f"label\ttext_a\n{good}\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"test\.tsv:1: expected the header"):
        load_task("msra-ner", data_dir=tmp_path, errors="skip")


def test_cmrc2018_is_split_by_article() -> None:
    data = task("cmrc2018")
    assert data.sizes() == {"train": 2255, "dev": 334, "test": 630} and sum(data.sizes().values()) == 3219
    contexts = {s: {ex.context for ex in exs} for s, exs in data.splits.items()}
    assert not contexts["train"] & contexts["dev"] and not contexts["train"] & contexts["test"]
    assert not contexts["dev"] & contexts["test"]
    articles = {s: {ex.id.split("_QUERY_")[0] for ex in exs} for s, exs in data.splits.items()}
    assert [len(articles[s]) for s in ("train", "dev", "test")] == [594, 85, 169]
    assert round(CMRC_HELD_OUT * 848) == 85 + 169
    assert data.spec.metric == "cmrc2018" and data.dropped == 0
    assert "193 dropped" in data.notes and "7 moved" in data.notes and "13 trimmed" in data.notes


def test_cmrc2018_answers_map_back_to_the_exact_characters() -> None:
    data, tok = task("cmrc2018"), chinese_tokenizer()
    examples = [ex for exs in data.splits.values() for ex in exs]
    answers = [(ex, a) for ex in examples for a in ex.answers]
    assert len(answers) == 9657 - 193
    assert all(ex.context[a.start:a.start + len(a.text)] == a.text and a.text == a.text.strip()
               for ex, a in answers)
    contexts = list(dict.fromkeys(ex.context for ex in examples))
    offsets = {c: o for c, (_, o) in zip(contexts, tok.encode_with_offsets(contexts))}
    inexact = []
    for ex, a in answers:
        covering = [(s, e) for s, e in offsets[ex.context] if s < a.start + len(a.text) and e > a.start]
        if ex.context[covering[0][0]:covering[-1][1]] != a.text:
            inexact.append((ex.id, a.text, ex.context[covering[0][0]:covering[-1][1]]))
    # the three documented annotation slips: an answer that starts inside a one-token number
    assert sorted(set(inexact)) == [("DEV_1933_QUERY_4", "30米", "4530米"), ("DEV_379_QUERY_2", "4个", "34个")]
    assert len(inexact) == 3


def test_cmrc2018_span_features_read_the_answer_back() -> None:
    data, tok = task("cmrc2018"), chinese_tokenizer()
    examples = data["dev"]
    features = span_features(examples, tok, FeatureOptions(max_seq_len=256, doc_stride=128))
    found = 0
    for feature in features:
        if feature.label is None or feature.label == (0, 0):
            continue
        ex = examples[feature.example]
        (start, _), (_, end) = feature.offsets[feature.label[0]], feature.offsets[feature.label[1]]
        if ex.id != "DEV_379_QUERY_2":  # the documented slip: "4个" read inside "34个"
            assert ex.context[start:end] == ex.answers[0].text, ex.id
        found += 1
    assert found >= len(examples)  # every question's first answer lies whole in some window


def test_cmrc_answer_repairs_on_a_small_file(tmp_path: Path) -> None:
    context = "西土城站拥有4个出入口，位于 北京。"
    qas = [{"id": "A_QUERY_0", "question": "几个？", "answers": [
               {"text": "4个", "answer_start": 5},  # one character off: moved to 6
               {"text": "一个也没有", "answer_start": -1},  # not in the context: dropped
               {"text": " 北京", "answer_start": 14}]},  # trimmed: 15
           {"id": "A_QUERY_1", "question": "哪里？", "answers": [{"text": "上海", "answer_start": -1}]}]
    doc = {"version": "v1.0", "data": [{"id": "A", "title": "t", "paragraphs": [
        {"id": "A", "context": context, "qas": qas}]}]}
    folder = tmp_path / "chinese" / "cmrc2018"
    folder.mkdir(parents=True)
    (folder / "dev.json").write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    data = load_task("cmrc2018", data_dir=tmp_path)
    (ex,) = [ex for exs in data.splits.values() for ex in exs]
    assert [(a.text, a.start) for a in ex.answers] == [("4个", 6), ("北京", 15)]
    assert data.dropped == 1 and "2 dropped" in data.notes and "1 moved" in data.notes and "1 trimmed" in data.notes


# ============================================================================ tokenizer


def test_tokenizer_equals_transformers_on_every_chnsenticorp_and_msra_sentence() -> None:
    tok, hf = chinese_tokenizer(), hf_chinese()
    assert (tok.vocab_size, tok.cls_id, tok.sep_id, tok.mask_id, tok.unk_id) == (21128, 101, 102, 103, 100)
    for name, expected in (("chnsenticorp", 12000), ("msra-ner", 6954)):
        texts = all_texts(name)
        assert len(texts) == expected
        ours = tok.encode_batch(texts)
        theirs = hf(texts, add_special_tokens=False)["input_ids"]
        differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
        assert not differ, f"{name}: {len(differ)} differ, first {texts[differ[0]]!r}"
        with_specials = [f["input_ids"] for f in tok.encode_for_model_batch(texts[:2000], max_length=128)]
        assert with_specials == hf(texts[:2000], truncation=True, max_length=128)["input_ids"]


def test_tokenizer_equals_the_python_port_of_google_bert_on_a_sample() -> None:
    """The fast oracle shares our Rust code; BertTokenizerLegacy (pure Python) does not."""
    legacy = pytest.importorskip("transformers.models.bert.tokenization_bert_legacy")
    slow = legacy.BertTokenizerLegacy(vocab_file=str(VOCAB), do_lower_case=True)
    texts = all_texts("chnsenticorp")[::40] + all_texts("msra-ner")[::40]
    assert chinese_tokenizer().encode_batch(texts) == [slow.encode(t, add_special_tokens=False) for t in texts]


def test_msra_tags_map_one_to_one_onto_tokens_and_back() -> None:
    data, tok = task("msra-ner"), chinese_tokenizer()
    labels = data.spec.labels
    for split in ("train", "test"):
        examples = data[split]
        features = tag_features(examples, tok, 128, labels)
        for f in features:  # one first piece (= one token) per character, every one labelled
            assert all((w is None) == (lab == -100) for w, lab in zip(f.word_ids, f.label))
        first_pieces = sum(w is not None for f in features for w in f.word_ids)
        assert first_pieces == sum(len(ex.tokens) for ex in examples)
        assert sum(len(f.input_ids) - 2 for f in features) == first_pieces  # no ## pieces either
        merged = merge_tag_predictions(features, [f.label for f in features],
                                       [len(ex.tokens) for ex in examples], fallback=0)
        assert merged == [[labels.index(t) for t in ex.tags] for ex in examples]
    assert sum(len(ex.tokens) > 126 for ex in data["test"]) > 0  # long sentences went through windows


# ============================================================================ metric


def test_cmrc_metric_by_hand() -> None:
    # F1 is over the longest common run of characters: 北京 in 北京大学 -> P 2/4, R 2/2
    scores = cmrc_scores({"a": "北京大学", "b": "在北京", "c": "上海"}, {"a": ["北京"], "b": ["北京。"], "c": ["北京"]})
    assert scores["exact_match"] == pytest.approx(0.0)
    assert scores["f1"] == pytest.approx((2 / 3 + 0.8 + 0) / 3)
    assert compute("cmrc2018", {"q": "《北京》"}, {"q": ["北京"]}) == {"exact_match": 1.0, "f1": 1.0}
    assert cmrc_scores({}, {"q": ["北京"]}) == {"exact_match": 0.0, "f1": 0.0}  # a missing prediction scores 0


@pytest.mark.parametrize("module", ["muppets.tasks.chinese", "muppets.metrics"])
def test_docstring_examples_run(module: str) -> None:
    assert doctest.testmod(importlib.import_module(module)).failed == 0
