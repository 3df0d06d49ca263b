"""Soft (probabilistic) labels: read from a ``probs`` column, trained on with the expected loss,
or as hard labels, or filtered by confidence (weak supervision's noise-aware end model)."""

from __future__ import annotations

import csv
import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch

from muppets.errors import ConfigError, DataError
from muppets.heads import task_loss
from muppets.tasks import read_table
from muppets.train import read_log
from muppets.transfer.batching import collate
from muppets.transfer.features import make_features
from muppets.transfer.finetune import confident, run, weak_targets

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_finetune import cfg_for, model_dir, text_task, tok  # noqa: E402,F401  (fixtures)


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_probs_are_read_in_label_order_from_lists_and_dicts(tmp_path):
    weak = write_jsonl(tmp_path / "weak.jsonl", [
        {"text": "good film", "probs": {"pos": 0.8, "neg": 0.2}},
        {"text": "bad film", "probs": {"neg": 1.0}},
    ])
    gold = tmp_path / "dev.csv"
    with open(gold, "w", newline="") as f:
        csv.writer(f).writerows([["text", "label"], ["fine film", "pos"], ["dull film", "neg"]])
    data = read_table({"train": weak, "dev": gold}, "classify", {"text": "text", "label": "label", "probs": "probs"},
                      fmt="auto")
    assert data.spec.labels == ["neg", "pos"]  # the label set includes the probs' keys
    first, second = data["train"]
    assert first.probs == pytest.approx((0.2, 0.8)) and first.label == "pos"  # no label: the most likely one
    assert second.probs == (1.0, 0.0) and second.label == "neg"
    assert all(ex.probs is None for ex in data["dev"])  # gold files have none
    listed = write_jsonl(tmp_path / "list.jsonl", [{"text": "good", "probs": [0.25, 0.75], "label": "1"}])
    (ex,) = read_table(listed, "classify", {"text": "text", "label": "label", "probs": "probs"}, fmt="jsonl",
                       labels=["0", "1"])["train"]
    assert ex.probs == (0.25, 0.75) and ex.label == "1"


@pytest.mark.parametrize("probs,message", [
    ([0.5, 0.6], "sum to 1.1000"),
    ([-0.5, 1.5], "non-negative"),
    ("nope", "not JSON"),
    ([0.2, 0.3, 0.5], "3 probs for 2 labels"),
    ({"maybe": 1.0}, "outside the label set"),
])
def test_bad_probs_name_the_file_and_line(tmp_path, probs, message):
    path = write_jsonl(tmp_path / "weak.jsonl", [{"text": "ok", "probs": [0.5, 0.5]}, {"text": "bad", "probs": probs}])
    with pytest.raises(DataError, match=message) as err:
        read_table(path, "classify", {"text": "text", "probs": "probs"}, fmt="jsonl", labels=["0", "1"])
    assert f"{path}:2" in str(err.value)


def test_probs_as_lists_need_the_label_set(tmp_path):
    path = write_jsonl(tmp_path / "weak.jsonl", [{"text": "ok", "probs": [0.5, 0.5], "label": "0"}])
    with pytest.raises(ConfigError, match="need the label set"):
        read_table(path, "classify", {"text": "text", "label": "label", "probs": "probs"}, fmt="jsonl")


def test_the_soft_loss_is_the_expected_hard_loss():
    """Cross-entropy against p equals sum_c p_c * CE(class c): the expected loss under the label model."""
    torch.manual_seed(0)
    logits = torch.randn(5, 3)
    probs = torch.softmax(torch.randn(5, 3), -1)
    expected = sum(probs[:, c] * torch.nn.functional.cross_entropy(logits, torch.full((5,), c), reduction="none")
                   for c in range(3)).mean()
    assert float(task_loss("classify", logits, probs)) == pytest.approx(float(expected), rel=1e-6)


def _weak_task():
    data = text_task("classify", n=32)
    for i, ex in enumerate(data["train"]):
        if i % 2 == 0:  # half the training examples carry weak labels, some unsure
            p = 0.9 if i % 4 == 0 else 0.6
            ex.probs = (1 - p, p) if ex.label == "1" else (p, 1 - p)
    return data


def test_targets_soft_hard_and_filtered(tok):
    data = _weak_task()
    train, spec = data["train"], data.spec
    feats = make_features("classify", train, tok, labels=spec.labels)
    soft = weak_targets(feats, train, spec, "soft")
    assert soft[0].label == train[0].probs  # weak: its probabilities
    assert soft[1].label == ((0.0, 1.0) if train[1].label == "1" else (1.0, 0.0))  # gold: one-hot
    assert collate(soft[:4], tok.pad_id)["labels"].shape == (4, 2)
    hard = weak_targets(feats, train, spec, "hard")
    assert [f.label for f in hard] == [f.label for f in feats]  # these probs agree with the gold labels
    kept = confident(train, 0.8)
    assert len(kept) == 24 and all(ex.probs is None or max(ex.probs) >= 0.8 for ex in kept)
    with pytest.raises(ConfigError, match="drops every"):
        confident([dataclasses.replace(train[2])], 0.95)


def test_one_hot_probs_train_exactly_as_hard_labels(model_dir, tmp_path):
    """Invariance: probs that are one-hot give the same losses, step for step, as the labels."""
    hard_data = text_task("classify", n=32)
    soft_data = text_task("classify", n=32)
    for ex in soft_data["train"]:
        ex.probs = (1.0, 0.0) if ex.label == "0" else (0.0, 1.0)
    losses = []
    for name, data in (("hard", hard_data), ("soft", soft_data)):
        run(cfg_for(model_dir, tmp_path / name, selection="last"), data=data)
        losses.append([r["loss"] for r in read_log(tmp_path / name) if "loss" in r])
    assert len(losses[0]) == 4 and losses[0] == pytest.approx(losses[1], abs=1e-6)


def test_soft_labels_change_training_and_filtering_drops_examples(model_dir, tmp_path):
    data = _weak_task()
    run(cfg_for(model_dir, tmp_path / "soft", selection="last"), data=data)
    run(cfg_for(model_dir, tmp_path / "hard", selection="last", weak_labels="hard"), data=_weak_task())
    soft = [r["loss"] for r in read_log(tmp_path / "soft") if "loss" in r]
    hard = [r["loss"] for r in read_log(tmp_path / "hard") if "loss" in r]
    assert soft != pytest.approx(hard, abs=1e-4)
    run(cfg_for(model_dir, tmp_path / "filtered", selection="last", min_confidence=0.8), data=_weak_task())
    steps = [r for r in read_log(tmp_path / "filtered") if "loss" in r]
    assert len(steps) == 3  # 24 of 32 examples kept: 3 batches of 8
    with pytest.raises(ConfigError, match="weak_labels"):
        cfg_for(model_dir, tmp_path / "x", weak_labels="maybe")


def test_weak_label_output_reads_back_as_soft_labels(tmp_path):
    """``muppets weak label`` writes what finetune's default columns read: no label list needed."""
    from muppets.cli import main
    lfs, texts = tmp_path / "lfs.py", tmp_path / "texts.txt"
    lfs.write_text("from muppets.weak import keyword_lf\n"
                   "LFS = [keyword_lf('kw_check', ['check'], 1), keyword_lf('kw_song', ['song'], 0)]\n",
                   encoding="utf-8")
    texts.write_text("check my channel\nnice song\ncheck this song\nhello\n", encoding="utf-8")
    out = tmp_path / "labels.jsonl"
    assert main(["weak", "label", str(lfs), "--task", str(texts), "--model", "majority", "--out", str(out),
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    data = read_table(out, "classify", {"text": "text", "label": "label", "probs": "probs"}, fmt="auto")
    assert data.spec.labels == ["0", "1"]
    first, second = data["train"][:2]
    assert first.probs[1] > first.probs[0] and first.label == "1"
    assert second.probs[0] > second.probs[1] and second.label == "0"


def test_probs_outside_train_never_become_labels(tmp_path, caplog):
    """A dev file written by the label model must not choose or score the model."""
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": "good", "probs": {"0": 0.2, "1": 0.8}}])
    dev = write_jsonl(tmp_path / "dev.jsonl", [{"text": "fine", "probs": {"0": 0.1, "1": 0.9}},
                                               {"text": "dull", "label": "0", "probs": {"0": 0.6, "1": 0.4}}])
    with caplog.at_level("WARNING"):
        data = read_table({"train": train, "dev": dev}, "classify", {"text": "text", "label": "label", "probs": "probs"},
                          fmt="auto")
    assert data["train"][0].label == "1" and data["train"][0].probs is not None
    unlabelled, gold = data["dev"]
    assert unlabelled.label is None and unlabelled.probs is None  # no gold: unlabelled
    assert gold.label == "0" and gold.probs is None  # gold kept, probs dropped
    assert "probs ignored on 2 dev examples" in caplog.text


def test_a_blank_probs_cell_means_none(tmp_path):
    path = tmp_path / "train.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["text", "label", "probs"], ["good", "1", '{"0": 0.3, "1": 0.7}'], ["bad", "0", ""]])
    first, second = read_table(path, "classify", {"text": "text", "label": "label", "probs": "probs"})["train"]
    assert first.probs == pytest.approx((0.3, 0.7)) and second.probs is None and second.label == "0"


def test_features_refuse_soft_labels_rather_than_silently_hardening_them(model_dir, tmp_path):
    from muppets.transfer.feature_based import FeatureConfig, run as features_run
    data = _weak_task()
    with pytest.raises(ConfigError, match="hard labels only"):
        features_run(FeatureConfig(model=str(model_dir), run_dir=str(tmp_path / "f"), device="cpu"), data=data)
