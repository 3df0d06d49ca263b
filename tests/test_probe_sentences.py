"""Sentence tasks in ``muppets probe``: the splits never select on the reported one (fine-tuning's
train slice when there is no labelled test split, dev otherwise); texts are split as BERT's basic
tokenizer does; a text too long for the model is cut, not dropped; a pooled probe learns a
sentence label a random tiny BERT can see and reports no control task; the command runs on the
real SST-2."""

from __future__ import annotations

import argparse
import doctest
import json
import random
import sys
from pathlib import Path

import pytest
import torch

from muppets.analysis import probe_sentences
from muppets.analysis.probe_cli import add_parser, run, summary_lines
from muppets.analysis.probe_data import ProbeCorpus, WordTask
from muppets.analysis.probe_sentences import load_sentence_corpus, majority_accuracy, split_words, truncating_corpus
from muppets.analysis.probe_features import ProbeFeatureSource, load_sentence_split, load_split
from muppets.analysis.probing import ProbeConfig, probe_model
from muppets.errors import ConfigError, DataError
from muppets.tasks import TaskData, TaskSpec, TextExample, load_task
from muppets.transfer.embedders import load_embedder
from muppets.transfer.selection import select

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny_backbones import WORDS, tiny_bert  # noqa: E402

VOCAB = [w for w in WORDS if w.isalpha()]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def test_doctests():
    assert doctest.testmod(probe_sentences).failed == 0


def test_split_words_keeps_tokens_and_splits_cjk_characters():
    assert split_words("it 's not a  good film , is n't it ?") == ["it", "'s", "not", "a", "good", "film", ",", "is",
                                                                  "n't", "it", "?"]
    assert split_words("酒店的服务很好，房间干净。") == list("酒店的服务很好，房间干净。")
    assert split_words("价格198元。OK") == ["价", "格", "198", "元", "。OK"]  # CJK characters only
    assert split_words("tab\there\u00a0too") == ["tab", "here", "too"]


def test_sst2_selects_on_fine_tunings_train_slice_and_reports_dev():
    corpus = load_sentence_corpus("sst2")
    data = load_task("sst2")
    sel = select("train-slice", "classify", [ex.label for ex in data["train"]], 0, 0.1, 1234)
    assert corpus.unit == "sentence" and corpus.selection.startswith("train-slice")
    assert len(corpus.sentences["dev"]) == len(sel.select) == 692
    assert len(corpus.sentences["train"]) == 6920 - 692 and len(corpus.sentences["test"]) == 872
    assert corpus.sentences["dev"][0] == split_words(data["train"][sel.select[0]].text)
    assert corpus.sentences["test"][-1] == split_words(data["dev"][-1].text)  # reported: SST-2's dev
    task = corpus.tasks["sst2"]
    assert [t[0] for t in task.tags["test"]] == [ex.label for ex in data["dev"]]
    assert majority_accuracy(task) == pytest.approx(444 / 872)  # train's majority is "1", dev holds 444 of them


def test_chnsenticorp_selects_on_dev_and_reports_test():
    corpus = load_sentence_corpus("chnsenticorp")
    data = load_task("chnsenticorp")
    assert corpus.selection == "dev"
    assert [len(corpus.sentences[s]) for s in ("train", "dev", "test")] == [9600, 1200, 1200]
    assert [t[0] for t in corpus.tasks["chnsenticorp"].tags["test"]] == [ex.label for ex in data["test"]]
    assert corpus.sentences["test"][5] == split_words(data["test"][5].text)
    assert all(len(w) == 1 for w in corpus.sentences["test"][0] if "\u4e00" <= w[0] <= "\u9fff")  # a character a word


def _task(splits: dict[str, list[tuple[str, str | None]]]) -> TaskData:
    spec = TaskSpec("toy", "classify", ["0", "1"], "mcc", ("sentence",))
    return TaskData(spec, {s: [TextExample(f"{s}-{i}", text, None, label, f"toy.tsv:{i + 2}")
                               for i, (text, label) in enumerate(rows)] for s, rows in splits.items()})


def test_labelled_test_without_dev_selects_on_a_train_slice_and_reports_test():
    train = [(f"t {i}", str(i % 2)) for i in range(40)]
    corpus = load_sentence_corpus("toy", data=_task({"train": train, "dev": [("d", None)],
                                                     "test": [("x 0", "0"), ("x 1", "1"), ("x 2", None)]}))
    assert corpus.selection.endswith("reported: test")
    assert corpus.sentences["test"] == [["x", "0"], ["x", "1"]]  # the labelled test rows only
    assert len(corpus.sentences["dev"]) == 4 and len(corpus.sentences["train"]) == 36
    picked = {" ".join(w) for split in ("train", "dev") for w in corpus.sentences[split]}
    assert picked == {text for text, _ in train}  # slice and rest partition train
    assert corpus.tasks["toy"].metric == "mcc"
    with pytest.raises(DataError, match=r"toy.tsv:3: the text ' ' has no words"):
        load_sentence_corpus("toy", data=_task({"train": [("a", "0"), (" ", "1")] * 10, "dev": [("b", "1")]}))
    with pytest.raises(ConfigError, match="no labelled dev or test"):
        load_sentence_corpus("toy", data=_task({"train": train, "dev": [("d", None)]}))


@pytest.mark.parametrize("name, kind", [("stsb", "regress"), ("conll2003", "tag")])
def test_only_single_text_classify_tasks(name, kind):
    with pytest.raises(ConfigError, match=f"{kind} task"):
        load_sentence_corpus(name)
    with pytest.raises(ConfigError, match="choose from"):
        ProbeConfig(tasks="sst2,not-a-task").task_list()


def _labelled(n: int, seed: int, long_every: int = 0) -> tuple[list[list[str]], list[list[str]]]:
    """Sentences of the tiny vocabulary, labelled by whether "bank" occurs; every
    ``long_every``-th is 100 words long (over the tiny BERT's 64 positions)."""
    rng = random.Random(seed)
    sentences, tags = [], []
    for i in range(n):
        words = [rng.choice([w for w in VOCAB if w != "bank"]) for _ in range(rng.randint(3, 7))]
        if i % 3 == 0:  # a third of the sentences hold "bank"
            words.insert(rng.randint(0, len(words)), "bank")
        if long_every and i % long_every == 0:
            words = words + ["the"] * 100
        sentences.append(words)
        tags.append(["P" if "bank" in words[:50] else "N"])
    return sentences, tags


def report_tags(split: str) -> list[list[str]]:
    return _sentence_corpus().tasks["sst2"].tags[split]


def _sentence_corpus(long_every: int = 0) -> ProbeCorpus:
    parts = {"train": _labelled(120, 1), "dev": _labelled(40, 2), "test": _labelled(40, 3, long_every)}
    sentences = {s: v[0] for s, v in parts.items()}
    task = WordTask("sst2", "toy", ["N", "P"], {s: v[1] for s, v in parts.items()}, spans=False,
                    metric="mcc")  # named as a sentence task
    return ProbeCorpus("toy", sentences, {"sst2": task}, unit="sentence", selection="dev")


def test_too_long_texts_are_cut_to_fit_and_counted_not_dropped(tmp_path):
    embedder = load_embedder(str(tiny_bert(tmp_path / "bert")))
    corpus = _sentence_corpus(long_every=10)
    cut = truncating_corpus(corpus, embedder)
    assert [len(cut.sentences[s]) for s in ("train", "dev", "test")] == [120, 40, 40]
    assert cut.truncated == {"train": 0, "dev": 0, "test": 4} and cut.dropped == {"train": 0, "dev": 0, "test": 0}
    assert max(embedder.positions(cut.sentences["test"])) <= 64
    long = cut.sentences["test"][0]
    assert long == corpus.sentences["test"][0][:len(long)] and embedder.positions([long + ["the"]])[0] > 64
    assert cut.stats()["test"]["truncated"] == 4


def test_pooled_probe_learns_a_sentence_label_without_a_control_task(tmp_path):
    model = tiny_bert(tmp_path / "bert")
    cfg = ProbeConfig(model=str(model), tasks="sst2", cache_dir=str(tmp_path / "cache"), max_epochs=60, patience=10,
                      lr=1e-2, sentence_batch_size=16, random_baseline=True, control=True)
    report = probe_model(cfg, {"toy": _sentence_corpus()})
    result = report["tasks"]["sst2"]
    majority = sum(t[0] == "N" for t in report_tags("test")) / 40
    assert result["unit"] == "sentence" and result["majority_accuracy"] == pytest.approx(majority) and majority > 0.6
    best = result["pretrained"]["best_layer"]
    assert best["accuracy"] >= 0.9 and "selectivity" not in best  # "bank" in the mean of the word vectors
    assert best["mcc"] > 0.75 and result["task_metric"] == "mcc"
    assert [r["layer"] for r in result["random_encoder"]["layers"]] == [0, 1, 2] and "mix" in result["pretrained"]
    assert report["data"]["toy"]["test"]["truncated"] == 0 and report["data"]["toy"]["test"]["sentences"] == 40


def test_probe_command_on_real_sst2(tmp_path, capsys):
    model = tiny_bert(tmp_path / "bert")
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "out"
    args = parser.parse_args(["probe", str(model), "--tasks", "sst2", "--out", str(out), "--cache-dir",
                              str(tmp_path / "cache"), "--epochs", "2", "--max-train-sentences", "60",
                              "--max-eval-sentences", "30", "--threads", "1"])
    assert run(args) == 0
    report = json.loads((out / "probe.json").read_text())
    sst2 = report["tasks"]["sst2"]
    assert sst2["selection"].startswith("train-slice (0.1 of train, seed 1234); reported: dev")
    assert {r["layer"] for r in sst2["pretrained"]["layers"]} == {0, 1, 2} and "random_encoder" in sst2
    assert report["data"]["sst2"]["train"]["sentences"] == 60 and report["data"]["sst2"]["test"]["sentences"] == 30
    assert (out / "probe_layers.png").stat().st_size > 1000
    assert "majority" in capsys.readouterr().out and len(summary_lines(report)) == 1


def test_sentence_features_are_the_mean_of_the_word_features(tmp_path):
    model = tiny_bert(tmp_path / "bert")
    source = ProbeFeatureSource(str(model), cache_dir=tmp_path / "cache")
    sentences = _sentence_corpus().sentences["dev"]
    words = load_split(source, sentences, "w")
    pooled = load_sentence_split(source, sentences, "s", chunk=7)  # several chunks
    offsets = words.offsets()
    expected = torch.stack([words.vectors[:, a:b].float().mean(1) for a, b in zip(offsets[:-1], offsets[1:])], 1)
    assert pooled.vectors.shape == expected.shape == (3, 40, 32) and pooled.lengths == [1] * 40
    assert torch.allclose(pooled.vectors.float(), expected, atol=2e-3)  # both through float16 caches
    again = load_sentence_split(source, sentences, "s", chunk=40)  # the cache: the same numbers
    assert torch.equal(again.vectors, pooled.vectors)


def test_rte_is_a_pair_task_on_its_train_slice_reporting_dev():
    corpus = load_sentence_corpus("rte")
    data = load_task("rte")
    assert corpus.unit == "pair" and corpus.selection.endswith("reported: dev")
    assert [len(corpus.sentences[s]) for s in ("train", "dev", "test")] == [2490 - 249, 249, 277]
    assert corpus.second is not None and len(corpus.second["test"]) == 277
    assert corpus.sentences["test"][3] == split_words(data["dev"][3].text)
    assert corpus.second["test"][3] == split_words(data["dev"][3].text_b)


def _pair_corpus(long_every: int = 0) -> ProbeCorpus:
    """Pairs labelled by whether the second text holds "bank": a probe that missed it would sit at
    the majority class."""
    parts = {}
    for split, (n, seed) in {"train": (200, 4), "dev": (60, 5), "test": (60, 6)}.items():
        first, _ = _labelled(n, seed, long_every)
        second, _ = _labelled(n, seed + 10)
        random.Random(seed).shuffle(second)
        tags = [["any" if "bank" in b else "none"] for b in second]
        parts[split] = (first, second, tags)
    task = WordTask("rte", "toy", ["none", "any"], {s: v[2] for s, v in parts.items()}, spans=False)
    return ProbeCorpus("toy", {s: v[0] for s, v in parts.items()}, {"rte": task}, unit="pair", selection="dev",
                       second={s: v[1] for s, v in parts.items()})


def test_pair_features_and_a_pair_probe(tmp_path):
    from muppets.analysis.probe_features import SplitFeatures, pair_features

    u, v = torch.randn(2, 5, 3), torch.randn(2, 5, 3)
    both = pair_features(SplitFeatures(u, [0, 1], [1] * 5), SplitFeatures(v, [0, 1], [1] * 5)).vectors
    assert both.shape == (2, 5, 12) and torch.equal(both[..., 6:9], (u - v).abs()) and torch.equal(both[..., 9:], u * v)
    model = tiny_bert(tmp_path / "bert")
    cfg = ProbeConfig(model=str(model), tasks="rte", cache_dir=str(tmp_path / "cache"), max_epochs=60, patience=10,
                      lr=1e-2, sentence_batch_size=16, random_baseline=False, control=True)
    report = probe_model(cfg, {"toy": _pair_corpus()})
    result = report["tasks"]["rte"]
    assert result["unit"] == "pair" and "selectivity" not in result["pretrained"]["best_layer"]
    assert result["pretrained"]["best_layer"]["accuracy"] >= 0.78 > result["majority_accuracy"] + 0.1


def test_a_pair_is_cut_when_either_text_is_too_long(tmp_path):
    embedder = load_embedder(str(tiny_bert(tmp_path / "bert")))
    corpus = _pair_corpus(long_every=10)  # first texts 0, 10, … of each split are long
    second = corpus.second["test"]
    second[5] = second[5] + ["the"] * 100  # a long second text
    second[7] = ["." * 90] + second[7]  # a first word of 90 pieces alone: the pair is left out
    tags = [t[0] for t in corpus.tasks["rte"].tags["test"]]
    cut = truncating_corpus(corpus, embedder)
    assert cut.truncated["test"] == 7 and cut.dropped["test"] == 1 and len(cut.second["test"]) == 59
    assert max(embedder.positions(cut.sentences["test"] + cut.second["test"])) <= 64
    kept = [i for i in range(60) if i != 7]
    assert [t[0] for t in cut.tasks["rte"].tags["test"]] == [tags[i] for i in kept]  # labels stay with their pairs
    assert cut.second["test"][6] == second[kept[6]] and cut.sentences["test"][6] == corpus.sentences["test"][kept[6]]
    assert cut.second["test"][5] == second[5][:len(cut.second["test"][5])]
