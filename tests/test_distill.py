"""``muppets distill``: tiny teacher → tiny student runs on every task kind, the loss terms
against hand-computed values on a fixed batch, the transfer set (unlabeled text, augmentation,
the leak filter), students (layers dropped, a preset, a directory), a student read back by
transformers, and the errors of bad input."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from muppets.distill import losses
from muppets.distill.config import DistillConfig
from muppets.distill.model import DistillData, DistillModel, Weights
from muppets.distill.run import run as distill_run
from muppets.distill.students import build_student, kept_layers, load_teacher
from muppets.distill.transfer_set import augmented, build_transfer_set, shingles
from muppets.errors import ConfigError
from muppets.interop.hf_bert import save_hf_bert
from muppets.models.bert import BertConfig, BertForPreTraining
from muppets.tasks.spec import TagExample, TextExample
from muppets.tokenizers.wordpiece import WordPieceTokenizer
from muppets.train import read_log
from muppets.transfer import Predictor
from muppets.transfer.features import FeatureOptions, make_features
from muppets.transfer.finetune import run as finetune_run

sys.path.insert(0, str(Path(__file__).parent))
from test_finetune import TASKS, _one_thread, cfg_for, text_task, tok  # noqa: E402,F401  (fixtures shared)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tok) -> Path:
    """A tiny random 4-layer BERT (hidden 32) with its tokenizer."""
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=4, num_heads=4,
                     intermediate_size=37, max_position_embeddings=64, pad_token_id=tok.pad_id)
    out = tmp_path_factory.mktemp("tiny-bert4")
    save_hf_bert(BertForPreTraining(cfg), out, tok)
    return out


_TEACHERS: dict[str, Path] = {}


def teacher_of(kind: str, model_dir: Path, root: Path) -> Path:
    """A tiny teacher fine-tuned on the toy task of ``kind`` (once per module)."""
    if kind not in _TEACHERS:
        finetune_run(cfg_for(model_dir, root / f"teacher-{kind}", epochs=8 if kind == "classify" else 2, selection="last"),
                     data=TASKS[kind]())
        _TEACHERS[kind] = root / f"teacher-{kind}" / "best"
    return _TEACHERS[kind]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("distill")


def distill_cfg(teacher: Path, run_dir: Path, **kw) -> DistillConfig:
    train = dict(run_dir=str(run_dir), batch_size=8, epochs=2, lr=1e-3, warmup_ratio=0.0, progress=False,
                 log_every=1, eval_batch_size=16, device="cpu", selection="last")
    train.update(kw.pop("train", {}))
    base = cfg_for(teacher, run_dir)
    return DistillConfig(teacher=str(teacher), train=dataclasses.replace(base, **train), **kw)


# ----------------------------------------------------------------------------- losses by hand


def _softmax(x: np.ndarray, T: float) -> np.ndarray:
    z = np.exp((x - x.max(-1, keepdims=True)) / T)
    return z / z.sum(-1, keepdims=True)


def test_soft_and_gold_terms_match_hand_computed_values():
    s = torch.tensor([[1.0, -1.0, 0.5], [0.0, 2.0, -0.5]])
    t = torch.tensor([[2.0, 0.0, 0.0], [-1.0, 1.0, 3.0]])
    T = 2.0
    ps, pt = _softmax(s.numpy(), T), _softmax(t.numpy(), T)
    want = T * T * float((pt * np.log(pt / ps)).sum())
    assert losses.soft_sum("classify", s, t, "kl", T).item() == pytest.approx(want, rel=1e-5)
    assert losses.soft_sum("classify", s, t, "mse", T).item() == pytest.approx(float(((s - t) ** 2).mean(-1).sum()))
    labels = torch.tensor([2, -100])  # the second example has no gold label
    gold = -math.log(float(_softmax(s.numpy(), 1.0)[0, 2]))
    assert losses.gold_sum("classify", s, labels).item() == pytest.approx(gold, rel=1e-5)
    assert losses.gold_units("classify", labels) == 1.0
    reg = losses.gold_sum("regress", torch.tensor([1.0, 2.0]), torch.tensor([0.5, float("nan")]))
    assert reg.item() == pytest.approx(0.25)


def test_tag_soft_term_counts_first_pieces_only():
    s, t = torch.randn(2, 4, 3), torch.randn(2, 4, 3)
    mask = torch.tensor([[False, True, True, False], [False, True, False, False]])
    per = losses.kl_rows(s, t, 1.0)  # (2, 4)
    assert losses.soft_sum("tag", s, t, "kl", 1.0, mask).item() == pytest.approx(float(per[mask].sum()), rel=1e-5)


def test_distill_model_loss_on_a_fixed_batch_is_the_weighted_hand_sum(model_dir, tok, root):
    teacher_dir = teacher_of("classify", model_dir, root)
    teacher = load_teacher(teacher_dir)
    cfg = distill_cfg(teacher_dir, root / "unused", student="bert-tiny", alpha=0.7, temperature=3.0,
                      student_config={"hidden_size": 16, "num_heads": 2, "intermediate_size": 20})
    torch.manual_seed(3)
    student, layer_map = build_student(cfg, teacher, tok)
    student.eval()  # no dropout: a fixed computation
    data = text_task("classify", n=8)
    feats = make_features("classify", data["train"], tok, FeatureOptions(max_seq_len=32), ["0", "1"])
    feats[1] = dataclasses.replace(feats[1], label=None)  # one example without gold
    targets = list(np.random.default_rng(0).normal(0, 3, (8, 2)).astype(np.float32))  # fixed teacher logits
    w = Weights(0.7, temperature=3.0)
    batches = DistillData(feats, targets, w, "classify", 8, 1, 1, 0, tok.pad_id)
    batch = batches.collate(list(range(8)))
    out = DistillModel(student, None, w, layer_map)(**batch)
    with torch.no_grad():
        logits = student(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).logits.numpy()
    ps, pt = _softmax(logits, 3.0), _softmax(np.stack(targets), 3.0)
    soft = 0.7 * 9.0 * float((pt * np.log(pt / ps)).sum())
    p1 = _softmax(logits, 1.0)
    gold = 0.3 * -sum(math.log(p1[k, f.label]) for k, f in enumerate(feats) if f.label is not None)
    assert out.loss_sums["soft"].item() == pytest.approx(soft, rel=1e-4)
    assert out.loss_sums["gold"].item() == pytest.approx(gold, rel=1e-4)
    assert batches.normalizers(batch) == {"soft": 8.0, "gold": 7.0}


# ----------------------------------------------------------------------------- runs


def test_tiny_distillation_lowers_the_loss_and_writes_a_task_directory(model_dir, root):
    teacher = teacher_of("classify", model_dir, root)
    data = text_task("classify")
    summary = distill_run(distill_cfg(teacher, root / "d-classify", student_layers=[0, 2],
                                      train={"epochs": 6}), data=data)
    rows = [r for r in read_log(root / "d-classify") if "loss" in r]
    first, last = np.mean([r["loss"] for r in rows[:2]]), np.mean([r["loss"] for r in rows[-2:]])
    assert last < first
    assert summary["student"]["num_layers"] == 2 and summary["student"]["teacher_layers"] == [0, 2]
    assert summary["losses"]["terms"] == ["soft", "gold"]
    best = Predictor(summary["best"])
    assert best.model.backbone.cfg.num_layers == 2
    assert best.predict([data["dev"][0].text])[0] in ("0", "1")
    metrics = json.loads((root / "d-classify" / "metrics.json").read_text())
    assert "accuracy" in metrics["dev"]


@pytest.mark.parametrize("kind", ["pair", "regress", "tag", "span", "choice"])
def test_every_kind_distils(kind, model_dir, root):
    teacher = teacher_of(kind, model_dir, root)
    summary = distill_run(distill_cfg(teacher, root / f"d-{kind}", student_num_layers=2, train={"epochs": 1}),
                          data=TASKS[kind]())
    assert summary["dev"], summary
    assert Predictor(summary["best"]).kind == kind


def test_intermediate_losses_with_a_narrower_preset_student(model_dir, root):
    teacher = teacher_of("tag", model_dir, root)
    summary = distill_run(distill_cfg(teacher, root / "d-tag-inter", student="bert-tiny",
                                      student_config={"hidden_size": 16, "num_heads": 2, "intermediate_size": 24,
                                                      "num_layers": 2},
                                      hidden_weight=1.0, attention_weight=1.0, train={"epochs": 1}),
                          data=TASKS["tag"]())
    assert summary["losses"]["terms"] == ["soft", "gold", "hidden", "attention"]
    assert summary["student"]["layer_map"] == [2, 4] and summary["student"]["hidden_size"] == 16
    rows = [r for r in read_log(root / "d-tag-inter") if "loss" in r]
    assert all(math.isfinite(r["loss"]) for r in rows)


def test_attention_loss_moves_the_student_towards_the_teacher_maps(model_dir, tok, root):
    teacher_dir = teacher_of("classify", model_dir, root)
    teacher = load_teacher(teacher_dir)
    cfg = distill_cfg(teacher_dir, root / "unused", student_layers=[1, 3])
    student, layer_map = build_student(cfg, teacher, tok)
    w = Weights(0.0, attention=1.0)  # gold 1.0 too: alpha 0
    feats = make_features("classify", text_task("classify", n=8)["train"], tok, FeatureOptions(max_seq_len=32), ["0", "1"])
    batch = DistillData(feats, None, w, "classify", 8, 1, 1, 0, tok.pad_id).collate(list(range(8)))
    model = DistillModel(student, teacher, w, layer_map)
    out = model(**batch)
    assert out.loss_sums["attention"].item() > 0
    out.loss_sums["attention"].backward()
    grads = [p.grad for p in student.backbone.layers[0].attention.qkv.parameters()] if hasattr(
        student.backbone.layers[0], "attention") else [p.grad for p in student.backbone.layers[0].parameters()]
    assert any(g is not None and float(g.abs().sum()) > 0 for g in grads)


# ----------------------------------------------------------------------------- transfer set


def test_transfer_set_reads_unlabeled_text_drops_leaks_and_augments(tmp_path):
    data = text_task("classify", n=6)
    dev_text = data["dev"][0].text
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(f"the plot was fine and the story was good.\n\n{dev_text}\n\nA lovely film. A dull one.\n",
                      encoding="utf-8")
    held = TextExample("s", "the plot was fine and the story was good.", None, "1", "x")  # selects the model
    corpus.write_text(corpus.read_text() + "\nthe plot was fine and the story was good.\n", encoding="utf-8")
    tset = build_transfer_set("classify", list(data["train"]), data, [str(corpus)], 0, 2, 0.5, 0.0, 3, "[MASK]",
                              selecting=[held])
    texts = [ex.text for ex in tset.examples]
    assert tset.counts == {"train": 6, "unlabeled": 2, "augmented": 12, "unlabeled_dropped_as_leaks": 3}
    assert texts[6:8] == ["A lovely film.", "A dull one."]  # the dev text and the selecting one dropped
    assert all(ex.label is None for ex in tset.examples[6:])
    assert any("[MASK]" in t for t in texts[8:])
    pairs = build_transfer_set("pair", [], text_task("pair", n=2), [str(corpus)], 0, 0, 0.1, 0.0, 1, "[MASK]")
    assert [(e.text, e.text_b) for e in pairs.examples] == [("A lovely film.", "A dull one.")]
    tags = build_transfer_set("tag", [], TASKS["tag"](), [str(corpus)], 1, 0, 0.1, 0.0, 1, "[MASK]")
    assert isinstance(tags.examples[0], TagExample) and tags.examples[0].tokens[-1] == "."
    with pytest.raises(ConfigError, match="dev split is what the run reports"):
        build_transfer_set("classify", [], data, ["task:dev"], 0, 0, 0.1, 0.0, 1, "[MASK]")


def test_augmentation_is_seeded_and_keeps_word_alignment_for_tags():
    import random

    ex = TextExample("a", "one two three four five six", None, "1", "x")
    first = [augmented(ex, random.Random(5), 0.3, 0.5, "[MASK]").text for _ in range(1)]
    assert first == [augmented(ex, random.Random(5), 0.3, 0.5, "[MASK]").text]
    tag = augmented(TagExample("t", ["a", "b", "c"], ["O", "O", "O"], "x"), random.Random(1), 0.9, 0.5, "[MASK]")
    assert len(tag.tokens) == 3 and tag.tags is None


def test_shingles_catch_a_sentence_inside_a_longer_text():
    dev = shingles("one two three four five six seven eight nine")
    assert shingles("so: one two three four five six seven eight nine ten") & dev
    assert not shingles("one two three four five six seven nine") & dev


# ----------------------------------------------------------------------------- students


def test_kept_layers_and_layer_map_validation(model_dir, root):
    assert kept_layers(12, [], 0) == [0, 2, 4, 6, 8, 10]
    with pytest.raises(ConfigError, match="student_layers"):
        kept_layers(4, [3, 1], 0)
    teacher = teacher_of("classify", model_dir, root)
    with pytest.raises(ConfigError, match="layer_map"):
        distill_run(distill_cfg(teacher, root / "bad-map", student_layers=[0, 1], hidden_weight=1.0,
                                layer_map=[1, 2, 3]), data=text_task("classify"))


def test_student_directory_round_trips_through_transformers(model_dir, root):
    transformers = pytest.importorskip("transformers")
    teacher = teacher_of("classify", model_dir, root)
    data = text_task("classify")
    summary = distill_run(distill_cfg(teacher, root / "d-hf", student_layers=[1, 3], train={"epochs": 1}), data=data)
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(summary["best"]).eval()
    ours = Predictor(summary["best"])
    feats = make_features("classify", data["dev"][:4], ours.tokenizer, ours.features, ours.labels)
    ids = torch.tensor([f.input_ids for f in feats if len(f.input_ids) == len(feats[0].input_ids)])
    with torch.no_grad():
        want = hf(input_ids=ids).logits
        got = ours.model(ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert hf.config.num_hidden_layers == 2


# ----------------------------------------------------------------------------- bad input


def test_bad_input_gives_one_clear_error(model_dir, tok, root, tmp_path):
    teacher = teacher_of("classify", model_dir, root)
    with pytest.raises(ConfigError, match="not a fine-tuned task model|no trained"):
        distill_run(distill_cfg(model_dir, tmp_path / "r1"), data=text_task("classify"))
    with pytest.raises(ConfigError, match="temperature.*must be > 0"):
        DistillConfig(teacher=str(teacher), temperature=0.0)
    other = WordPieceTokenizer.train(["completely different words here", "zebra yak"] * 3, vocab_size=120,
                                     min_frequency=1)
    cfg = BertConfig(vocab_size=other.vocab_size, hidden_size=32, num_layers=1, num_heads=4, intermediate_size=37,
                     max_position_embeddings=64, pad_token_id=other.pad_id)
    foreign = tmp_path / "foreign"
    save_hf_bert(BertForPreTraining(cfg), foreign, other)
    with pytest.raises(ConfigError, match="vocabulary .* differs from the teacher's"):
        distill_run(distill_cfg(teacher, tmp_path / "r2", student=str(foreign)), data=text_task("classify"))
    with pytest.raises(ConfigError, match="alpha=0"):
        DistillConfig(teacher=str(teacher), alpha=0.0, augment=2)


def test_a_bilstm_student_distils_and_predicts(model_dir, root):
    teacher = teacher_of("classify", model_dir, root)
    summary = distill_run(distill_cfg(teacher, root / "d-bilstm", student="bilstm",
                                      student_config={"embedding_size": 16, "lstm_size": 8},
                                      train={"epochs": 2, "lr": 1e-2}), data=text_task("classify"))
    assert summary["student"]["family"] == "bilstm"
    best = Predictor(summary["best"])
    assert best.model.family == "bilstm" and best.predict(["a lovely film"])[0] in ("0", "1")
