"""Fine-tuning: features per kind, bucketed batching, ``run()`` on every kind with a tiny random
BERT, early stopping (and the Trainer's ``should_stop``), HF parity of ``best/``, Predictor,
``--seeds`` summaries and the CLI."""

from __future__ import annotations

import dataclasses

import json
import logging
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from muppets.cli import main as cli_main
from muppets.interop.hf_bert import save_hf_bert
from muppets.models.bert import BertConfig, BertForPreTraining
from muppets.errors import ConfigError
from muppets.paths import data_dir
from muppets.tasks import load_task
from muppets.tasks.spec import (Answer, ChoiceExample, SpanExample, TagExample, TaskData, TaskSpec,
                                TextExample)
from muppets.tokenizers.wordpiece import WordPieceTokenizer
from muppets.train import Trainer, read_log
from muppets.transfer import Predictor
from muppets.transfer.batching import EpochData, bucketed_batches, collate
from muppets.transfer.features import (IGNORE, FeatureOptions, make_features, merge_tag_predictions,
                                       span_features, window_starts)
from muppets.transfer.finetune import FinetuneConfig, mean_std, run, run_seeds
from muppets.transfer.predict import SpanOptions, decode_spans

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _toy_train import ToyData, ToyModel, toy_config  # noqa: E402

POS = ["good", "great", "fine", "nice", "superb", "lovely"]
NEG = ["bad", "awful", "poor", "dull", "boring", "terrible"]
FILLER = ["the", "movie", "was", "really", "quite", "a", "film", "plot", "story", "and"]
CORPUS = [" ".join(POS + NEG + FILLER), "unbelievably unremarkable paris london john mary",
          "which who what where is are did ? . , !"] * 3


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def tok() -> WordPieceTokenizer:
    return WordPieceTokenizer.train(CORPUS, vocab_size=400, min_frequency=1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tok) -> Path:
    """A tiny random BERT (hidden 32) with its tokenizer, as an HF directory."""
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=2, num_heads=4,
                     intermediate_size=37, max_position_embeddings=64, pad_token_id=tok.pad_id)
    out = tmp_path_factory.mktemp("tiny-bert")
    save_hf_bert(BertForPreTraining(cfg), out, tok)
    return out


def _sentence(rng: np.random.Generator, positive: bool) -> str:
    words = [str(rng.choice(FILLER))] + list(rng.choice(POS if positive else NEG, 3))
    rng.shuffle(words)
    return " ".join(words)


def text_task(kind: str, n: int = 32, seed: int = 0) -> TaskData:
    rng = np.random.default_rng(seed)
    splits = {}
    for split, size in (("train", n), ("dev", 12), ("test", 8)):
        exs = []
        for i in range(size):
            label = i % 2
            a = _sentence(rng, bool(label))
            b = _sentence(rng, bool(label)) if kind != "classify" else None
            value = float(label) * 4.0 + float(rng.random()) if kind == "regress" else str(label)
            exs.append(TextExample(f"{split}-{i}", a, b, value, "toy"))
        splits[split] = exs
    labels = [] if kind == "regress" else ["0", "1"]
    metric = {"classify": "accuracy", "pair": "f1", "regress": "pearson_spearman"}[kind]
    return TaskData(TaskSpec(f"toy-{kind}", kind, labels, metric, ("text",)), splits)


def tag_task() -> TaskData:
    rng = np.random.default_rng(1)
    def sentence(i: int) -> TagExample:
        words = list(rng.choice(FILLER + ["john", "mary", "paris", "london"], 6))
        tags = ["B-PER" if w in ("john", "mary") else "B-LOC" if w in ("paris", "london") else "O"
                for w in words]
        return TagExample(f"s{i}", words, tags, "toy")
    splits = {"train": [sentence(i) for i in range(16)], "dev": [sentence(i) for i in range(16, 24)]}
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    return TaskData(TaskSpec("toy-tag", "tag", labels, "entity_f1", ("tokens",)), splits)


def span_example(i: int, filler: int = 3) -> SpanExample:
    pre = " ".join(FILLER[: filler + i % 4])
    context = f"{pre} john went to paris and mary stayed in london . the story was good ."
    answer = "paris" if i % 2 else "london"
    question = "where did john go ?" if i % 2 else "where did mary stay ?"
    return SpanExample(f"q{i}", question, context, [Answer(answer, context.index(answer))], "t", "toy")


def span_task() -> TaskData:
    splits = {"train": [span_example(i) for i in range(12)], "dev": [span_example(i) for i in range(12, 18)]}
    return TaskData(TaskSpec("toy-span", "span", [], "squad", ("question", "context")), splits)


def choice_task() -> TaskData:
    rng = np.random.default_rng(2)
    def item(i: int) -> ChoiceExample:
        gold = i % 3
        endings = [_sentence(rng, k == gold) for k in range(3)]
        return ChoiceExample(f"c{i}", "the movie was", endings, gold, "toy")
    splits = {"train": [item(i) for i in range(12)], "dev": [item(i) for i in range(12, 18)]}
    return TaskData(TaskSpec("toy-choice", "choice", ["0", "1", "2"], "accuracy", ("context", "endings")), splits)


TASKS = {"classify": lambda: text_task("classify"), "pair": lambda: text_task("pair"),
         "regress": lambda: text_task("regress"), "tag": tag_task, "span": span_task,
         "choice": choice_task}


def cfg_for(model_dir: Path, run_dir: Path, **kw) -> FinetuneConfig:
    base = dict(model=str(model_dir), run_dir=str(run_dir), max_seq_len=48, batch_size=8, epochs=1,
                lr=1e-3, warmup_ratio=0.0, progress=False, log_every=0, eval_batch_size=16,
                device="cpu")
    base.update(kw)
    return FinetuneConfig(**base)


# ----------------------------------------------------------------------------- features


def test_text_features_match_the_tokenizer_and_index_labels(tok):
    data = text_task("pair", n=4)
    feats = make_features("pair", data["train"], tok, FeatureOptions(max_seq_len=9), ["0", "1"])
    for ex, f in zip(data["train"], feats):
        assert f.input_ids == tok.encode_for_model(ex.text, ex.text_b, max_length=9)["input_ids"]
        assert len(f.input_ids) <= 9 and f.label == int(ex.label)
    reg = make_features("regress", text_task("regress", n=2)["train"], tok)
    assert isinstance(reg[0].label, float)


def test_tag_first_piece_labelling_and_mapping_back(tok):
    words = ["unbelievably", "john", "went", "unremarkable", "paris"]
    tags = ["O", "B-PER", "O", "O", "B-LOC"]
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    ex = TagExample("x", words, tags, "toy")
    (f,) = make_features("tag", [ex], tok, FeatureOptions(max_seq_len=64), labels)
    pieces = [tok.encode(w) for w in words]
    assert len(pieces[2]) > 1  # "went" is split into several pieces
    expect, word_ids = [IGNORE], [None]
    for w, p in enumerate(pieces):
        expect += [labels.index(tags[w])] + [IGNORE] * (len(p) - 1)
        word_ids += [w] + [None] * (len(p) - 1)
    assert f.label == expect + [IGNORE] and f.word_ids == word_ids + [None]
    assert f.input_ids == [tok.cls_id, *[i for p in pieces for i in p], tok.sep_id]
    gold = [t if t != IGNORE else 0 for t in f.label]
    assert merge_tag_predictions([f], [gold], [len(words)], 0) == [[labels.index(t) for t in tags]]


def test_long_sentences_become_windows_that_lose_no_word(tok):
    words = (["unbelievably", "john", "the", "unremarkable", "paris", "movie"] * 5)
    tags = ["O", "B-PER", "O", "O", "B-LOC", "O"] * 5
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    ex = TagExample("long", words, tags, "toy")
    feats = make_features("tag", [ex], tok, FeatureOptions(max_seq_len=10), labels)
    assert len(feats) > 3 and all(len(f.input_ids) <= 10 for f in feats)
    seen = [w for f in feats for w in f.word_ids if w is not None]
    assert seen == list(range(len(words)))  # every word once, in order
    preds = [[t if t != IGNORE else 0 for t in f.label] for f in feats]
    merged = merge_tag_predictions(feats, preds, [len(words)], 0)
    assert [labels[t] for t in merged[0]] == tags


def test_span_windows_labels_and_offsets(tok):
    ex = span_example(1, filler=9)
    assert window_starts(10, 4, 4) == [0, 4, 8]
    opts = FeatureOptions(max_seq_len=20, doc_stride=100, max_query_len=8)  # non-overlapping
    feats = span_features([ex], tok, opts)
    assert len(feats) > 1 and all(len(f.input_ids) <= 20 for f in feats)
    labelled = [f for f in feats if f.label != (0, 0)]
    assert len(labelled) == 1  # the answer lies in exactly one window
    s, e = labelled[0].label
    assert ex.context[labelled[0].offsets[s][0]: labelled[0].offsets[e][1]] == "paris"
    for f in feats:  # question tokens carry no offsets; segment ids mark the window
        first = f.token_type_ids.index(1)
        assert all(o is None for o in f.offsets[:first]) and f.offsets[-1] is None
    overlap = span_features([ex], tok, FeatureOptions(max_seq_len=20, doc_stride=3, max_query_len=8))
    assert sum(f.label != (0, 0) for f in overlap) >= 1 and len(overlap) > len(feats)


def test_span_offsets_give_back_squad_answers():
    tok = WordPieceTokenizer.from_vocab(data_dir() / "vocab" / "bert-base-uncased" / "vocab.txt")
    examples = load_task("squad")["dev"][:50]
    feats = span_features(examples, tok, FeatureOptions(max_seq_len=96, doc_stride=32))
    found = Counter()
    for f in feats:
        ex = examples[f.example]
        if f.label != (0, 0):
            s, e = f.label
            assert ex.context[f.offsets[s][0]: f.offsets[e][1]] == ex.answers[0].text
            found[f.example] += 1
    assert len(found) == len(examples)  # overlapping windows: every answer in some window
    n_windows = Counter(f.example for f in feats)
    assert max(n_windows.values()) > 1
    disjoint = span_features(examples, tok, FeatureOptions(max_seq_len=96, doc_stride=512))
    assert max(Counter(f.example for f in disjoint if f.label != (0, 0)).values()) == 1


def test_span_decoding_nbest_word_edges_and_null(tok):
    context = "mary went to paris ."
    ex = SpanExample("q", "where did mary go ?", context, [], "t", "toy")
    (f,) = span_features([ex], tok, FeatureOptions(max_seq_len=32))
    pieces = [tok.id_to_token(i) for i in f.input_ids]
    first = f.token_type_ids.index(1)  # the context starts here
    at = {p: pieces.index(p, first) for p in ("mary", "##n", "paris", ".")}
    logits = np.zeros((len(pieces), 2), dtype=np.float32)
    logits[at["##n"], 0] = 9.0  # inside "went": never a start
    logits[at["mary"], 0], logits[at["paris"], 1] = 5.0, 4.0
    logits[at["."], 0] = 6.0  # a start after the best end: no span
    logits[1, 1] = 8.0  # a question token: never an end
    [(text, score, start, end)] = decode_spans([ex], [f], [logits], SpanOptions())
    assert (text, score, start, end) == ("mary went to paris", 9.0, 0, 18) and context[start:end] == text
    short = decode_spans([ex], [f], [logits], SpanOptions(max_answer_len=2))
    assert short == [(".", 6.0, 19, 20)]  # 4 tokens is too long now; "." alone (6 + 0) beats "paris" (0 + 4)
    logits[0] = [6.0, 5.0]  # s_null = 11 > 9
    assert decode_spans([ex], [f], [logits], SpanOptions())[0][0] == "mary went to paris"
    assert decode_spans([ex], [f], [logits], SpanOptions(allow_null=True))[0] == ("", 11.0, 0, 0)
    assert decode_spans([ex], [f], [logits], SpanOptions(allow_null=True, null_threshold=3.0))[0][0] != ""


def test_choice_features_and_collate(tok):
    data = choice_task()
    feats = make_features("choice", data["train"][:3], tok, FeatureOptions(max_seq_len=32))
    assert len(feats[0].input_ids) == 3 and feats[1].label == 1
    batch = collate(feats, tok.pad_id)
    assert batch["input_ids"].shape[:2] == (3, 3) and batch["labels"].tolist() == [0, 1, 2]
    assert batch["attention_mask"].sum() == sum(len(r) for f in feats for r in f.input_ids)


# ----------------------------------------------------------------------------- batching


def test_bucketed_batches_are_deterministic_and_cover_each_example_once():
    lengths = list(np.random.default_rng(0).integers(3, 60, size=203))
    a = bucketed_batches(lengths, 8, seed=5, epoch=0, bucket_batches=4)
    assert a == bucketed_batches(lengths, 8, seed=5, epoch=0, bucket_batches=4)
    assert a != bucketed_batches(lengths, 8, seed=5, epoch=1, bucket_batches=4)
    assert sorted(i for b in a for i in b) == list(range(203))
    assert sum(len(b) < 8 for b in a) == 1
    spread = np.mean([max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in a])
    assert spread < 20  # length-sorted buckets: little padding


def test_tagging_batches_are_not_length_sorted_by_default(tok):
    """Issue 15, item 14: sorted batches cost CoNLL-2003 3.7 F1 against transformers' shuffled
    ones; tagging now draws shuffled batches (buckets of one batch), sentence tasks keep the sort,
    and ``bucket_batches`` overrides either."""
    from muppets.transfer.batching import BUCKET_BATCHES

    rng = np.random.default_rng(0)
    examples = [TagExample(f"t{i}", ["a"] * int(n), ["O"] * int(n), "x") for i, n in enumerate(rng.integers(1, 30, 96))]
    feats = make_features("tag", examples, tok, labels=["O"])
    tag = EpochData(feats, "tag", 8, 1, epochs=1, seed=3, pad_id=tok.pad_id)
    assert tag.bucket_batches == 1
    assert tag.epoch_batches(0) == bucketed_batches(tag.lengths, 8, 3, 0, bucket_batches=1)
    spread = np.mean([max(tag.lengths[i] for i in b) - min(tag.lengths[i] for i in b) for b in tag.epoch_batches(0)])
    assert spread > 10  # mixed lengths in a batch
    assert EpochData(feats, "classify", 8, 1, 1, 3, tok.pad_id).bucket_batches == BUCKET_BATCHES
    assert EpochData(feats, "tag", 8, 1, 1, 3, tok.pad_id, bucket_batches=50).bucket_batches == 50
    with pytest.raises(ConfigError, match="bucket_batches"):
        FinetuneConfig(bucket_batches=-1)


def test_epoch_data_maps_steps_and_splits_across_ranks(tok):
    feats = make_features("classify", text_task("classify", n=20)["train"], tok, labels=["0", "1"])
    data = EpochData(feats, "classify", 8, 2, epochs=2, seed=3, pad_id=tok.pad_id)
    assert data.steps_per_epoch == 3 and data.total_steps == 6
    def ids(batches):
        return sorted(map(tuple, (r[r != tok.pad_id].tolist() for b in batches for r in b["input_ids"])))

    sizes = []
    for step in range(6):
        one = data.micro_batches(step, 0, 1)
        two = data.micro_batches(step, 0, 2) + data.micro_batches(step, 1, 2)
        assert len(one) == len(two) // 2 == 2 and ids(one) == ids(two)
        sizes.append(sum(len(b["labels"]) for b in one))
    assert sorted(sizes[:3]) == sorted(sizes[3:]) == [4, 8, 8]  # 20 = 8 + 8 + 4 per epoch
    for b in one:  # each micro-batch padded to its own longest row
        assert b["attention_mask"].sum(1).max() == b["input_ids"].shape[1]


# ----------------------------------------------------------------------------- training


def test_classify_loss_decreases_and_outputs(model_dir, tmp_path):
    cfg = cfg_for(model_dir, tmp_path / "run", epochs=6, lr=1e-2)
    summary = run(cfg, data=text_task("classify"))
    losses = [r["loss"] for r in read_log(tmp_path / "run") if "loss" in r]
    assert len(losses) == 24
    assert np.mean(losses[-4:]) < 0.5 * np.mean(losses[:4])
    assert summary["dev"]["accuracy"] >= 0.9
    lines = [json.loads(x) for x in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert Counter(x["split"] for x in lines) == {"dev": 12, "test": 8}
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["dev"] == summary["dev"]
    pred = Predictor(tmp_path / "run" / "best", batch_size=5)
    dev = text_task("classify")["dev"]
    assert pred.predict([ex.text for ex in dev]) == [x["prediction"] for x in lines if x["split"] == "dev"]


@pytest.mark.parametrize("kind", ["pair", "regress", "tag", "span", "choice"])
def test_every_kind_trains_predicts_and_round_trips(kind, model_dir, tmp_path):
    data = TASKS[kind]()
    summary = run(cfg_for(model_dir, tmp_path, epochs=2), data=data)
    key = {"pair": "f1", "regress": "corr", "tag": "f1", "span": "f1", "choice": "accuracy"}[kind]
    assert key in summary["dev"] and summary["steps"] == 2 * summary["steps_per_epoch"]
    lines = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    dev = data["dev"]
    pred = Predictor(tmp_path / "best")
    inputs = {"pair": lambda e: (e.text, e.text_b), "regress": lambda e: (e.text, e.text_b),
              "tag": lambda e: e.tokens, "span": lambda e: (e.question, e.context),
              "choice": lambda e: (e.context, e.endings)}[kind]
    out = pred.predict([inputs(e) for e in dev])
    saved = [x["prediction"] for x in lines if x["split"] == "dev"]
    if kind == "span":
        assert [o["answer"] for o in out] == saved and all(o["answer"] in e.context for o, e in zip(out, dev))
    elif kind == "regress":
        assert np.allclose(out, saved, atol=1e-5)
    else:
        assert out == saved
    if kind == "tag":
        assert [len(t) for t in out] == [len(e.tokens) for e in dev]


def test_best_loads_in_transformers_with_equal_logits(model_dir, tmp_path):
    transformers = pytest.importorskip("transformers")
    run(cfg_for(model_dir, tmp_path, epochs=1), data=text_task("classify", n=8))
    pred = Predictor(tmp_path / "best")
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "best").eval()
    feats = make_features("classify", text_task("classify", n=4)["train"], pred.tokenizer,
                          labels=pred.labels)
    batch = collate(feats, pred.tokenizer.pad_id)
    batch.pop("labels")
    with torch.no_grad():
        ours = pred.model(**batch).logits
        theirs = hf(**batch).logits
    assert torch.allclose(ours, theirs, atol=1e-5)
    assert hf.config.id2label == {0: "0", 1: "1"}


def test_early_stopping_stops_and_keeps_the_best(model_dir, tmp_path):
    cfg = cfg_for(model_dir, tmp_path, epochs=3, lr=0.0, patience=2, eval_every=1)
    summary = run(cfg, data=text_task("classify", n=32))
    state = json.loads((tmp_path / "early_stopping.json").read_text())
    assert summary["stopped_early"] and summary["steps"] == 3 < 3 * summary["steps_per_epoch"]
    assert state["best_step"] == 1 == summary["best_step"] and state["since_best"] == 2
    kept = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.is_dir())
    assert kept == ["step-00000003"] and (tmp_path / "best").is_dir()  # the last checkpoint and the best model
    again = run(cfg, data=text_task("classify", n=32))  # a rerun sees it stopped: no training
    assert again["steps"] == 3 and again["dev"] == summary["dev"]
    from muppets.transfer.finetune import train_config  # more only when asked (the Trainer's tests keep them)
    assert [train_config(dataclasses.replace(cfg, keep_checkpoints=k), 3, 1).keep_checkpoints for k in (2, "all")] \
        == [2, "all"]


def test_a_run_that_stopped_early_refuses_other_settings(model_dir, tmp_path):
    from muppets.errors import RunDirError

    cfg = cfg_for(model_dir, tmp_path, epochs=3, lr=0.0, patience=2, eval_every=1)
    data = text_task("classify", n=32)
    run(cfg, data=data)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    for changed, shown in (({"lr": 1e-3}, "lr: 0.0 -> 0.001"), ({"max_seq_len": 40}, "max_seq_len: 48 -> 40")):
        with pytest.raises(RunDirError, match=f"finished at step 3.*{shown}"):
            run(dataclasses.replace(cfg, **changed), data=data)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before  # metrics.json untouched
    assert run(dataclasses.replace(cfg, log_every=5), data=data)["steps"] == 3  # pacing may change


def test_best_keeper_chosen_on_another_metric_is_a_one_line_error(tmp_path):
    from muppets.errors import RunDirError
    from muppets.transfer.finetune import BestKeeper

    path = tmp_path / "early_stopping.json"
    path.write_text(json.dumps({"history": [{"step": 1, "accuracy": 0.5}, {"step": 2, "accuracy": 0.6}]}))
    with pytest.raises(RunDirError, match="chose its model on 'accuracy', and this command on 'f1'") as err:
        BestKeeper(path, "f1", 2, lambda: None, is_main=True)
    assert "\n" not in str(err.value)
    assert BestKeeper(path, "f1", 2, lambda: None, is_main=True, fresh=True).state["history"] == []


def test_trainer_should_stop_checkpoints_and_returns(tmp_path):
    calls = []

    def should_stop(step, metrics):
        calls.append((step, metrics["x"]))
        return step >= 3

    config = toy_config(steps=6, eval_every=1)
    trainer = Trainer(ToyModel(), ToyData(8, 2), config, tmp_path, evaluate=lambda m: {"x": 1.0},
                      should_stop=should_stop, eval_also_at=lambda s: s == 2)
    result = trainer.train(resume=False)
    assert result.step == 3 and result.stopped_early and calls == [(1, 1.0), (2, 1.0), (3, 1.0)]
    assert result.checkpoint is not None and result.checkpoint.name.endswith("3")
    late = Trainer(ToyModel(), ToyData(8, 2), toy_config(steps=4), tmp_path / "b",
                   evaluate=lambda m: {"x": 1.0}, should_stop=lambda s, m: True,
                   eval_also_at=lambda s: s == 2)
    result = late.train(resume=False)  # eval at 2 (eval_also_at) stops; the last step is no stop
    assert result.step == 2 and result.stopped_early


def test_seeds_summary_has_mean_and_std(model_dir, tmp_path):
    summary = run_seeds(cfg_for(model_dir, tmp_path, epochs=1), [1, 2], data=text_task("classify", n=8))
    acc = summary["dev"]["accuracy"]
    assert len(acc["values"]) == 2 and acc["mean"] == pytest.approx(np.mean(acc["values"]))
    assert acc["std"] == pytest.approx(np.std(acc["values"], ddof=1))
    assert json.loads((tmp_path / "summary.json").read_text())["seeds"] == [1, 2]
    assert (tmp_path / "seed-2" / "best" / "config.json").is_file()
    assert mean_std([3.0])["std"] == 0.0


def test_cli_finetune_evaluate_and_errors(model_dir, tmp_path, capsys):
    data = text_task("classify", n=8)
    for split in ("train", "dev"):
        rows = ["text,label"] + [f"{ex.text},{ex.label}" for ex in data[split]]
        (tmp_path / f"{split}.csv").write_text("\n".join(rows) + "\n")
    args = ["finetune", str(tmp_path / "train.csv"), "--dev", str(tmp_path / "dev.csv"),
            "--model", str(model_dir), "--seeds", "1,2", f"run_dir={tmp_path / 'r'}", "epochs=1",
            "batch_size=4", "max_seq_len=32", "progress=false", "device=cpu"]
    assert cli_main(args) == 0
    assert "accuracy" in capsys.readouterr().out
    args = ["evaluate", str(tmp_path / "train.csv"), "--dev", str(tmp_path / "dev.csv"),
            "--model", str(tmp_path / "r" / "seed-1" / "best"), "--split", "dev"]
    assert cli_main(args) == 0
    out = capsys.readouterr().out
    metrics = json.loads((tmp_path / "r" / "seed-1" / "metrics.json").read_text())["dev"]
    assert f"{metrics['accuracy']:10.4f}" in out
    assert cli_main(["finetune", "no-such-task", "--model", str(model_dir)]) == 2
    assert cli_main(["finetune", str(tmp_path / "train.csv"), "--model", str(model_dir), "lr=abc"]) == 2


@pytest.mark.slow
@pytest.mark.skipif(not __import__("os").environ.get("MUPPETS_SLOW"), reason="set MUPPETS_SLOW=1")
def test_smoke_minilm_on_a_squad_slice(tmp_path):
    """~15 s: MiniLM fine-tuned for 4 steps on 32 real SQuAD questions, scored on 40."""
    cfg = FinetuneConfig(model="minilm", run_dir=str(tmp_path), max_train_examples=32,
                         max_eval_examples=40, batch_size=16, epochs=1, progress=False, device="cpu")
    cfg.task.name = "squad"
    summary = run(cfg)
    assert summary["steps"] == summary["steps_per_epoch"] >= 2 and 0 <= summary["dev"]["f1"] <= 1
    answer = Predictor(tmp_path / "best").predict([("Who wrote it?", "It was written by John Smith.")])
    assert answer[0]["answer"] in "It was written by John Smith."
    assert (tmp_path / "best" / "modules.json").is_file()  # minilm's pooling + normalize kept (issue 49)


def test_init_random_draws_fresh_weights_with_the_same_architecture(model_dir, tmp_path):
    from muppets.interop.hf_tasks import load_hf_task_model
    from muppets.transfer.finetune import _setup
    pretrained = load_hf_task_model(model_dir, kind="classify", num_labels=2).state_dict()
    data = text_task("classify", n=8)
    fresh = _setup(cfg_for(model_dir, tmp_path, init="random"), data, 0).model.state_dict()
    assert fresh.keys() == pretrained.keys()
    emb = "backbone.embeddings.tokens.weight"
    assert not torch.equal(fresh[emb], pretrained[emb])
    assert fresh[emb].std().item() == pytest.approx(0.02, rel=0.1)  # the initializer_range
    ln = [k for k in fresh if "norm" in k and k.endswith("weight")]
    assert ln and all(torch.equal(fresh[k], torch.ones_like(fresh[k])) for k in ln)
    again = _setup(cfg_for(model_dir, tmp_path, init="random"), data, 0).model.state_dict()
    assert torch.equal(again[emb], fresh[emb])  # seeded
    summary = run(cfg_for(model_dir, tmp_path / "r", epochs=1, init="random"), data=data)
    assert summary["init"] == "random"
    with pytest.raises(Exception, match="init"):
        cfg_for(model_dir, tmp_path, init="zeros")


def dropout_rates(model: torch.nn.Module) -> set[float]:
    """Every dropout rate the model's forward reads: the functional ones are float attributes
    (``dropout`` of embeddings and attention, ``dropout_p`` of heads, a block's
    ``cfg.hidden_dropout``), and ``nn.Dropout`` modules; at least one of each kind is there."""
    found: dict[str, list[float]] = {}
    for m in model.modules():
        for name in ("dropout", "dropout_p"):
            if isinstance(getattr(m, name, None), float):
                found.setdefault(f"{type(m).__name__}.{name}", []).append(getattr(m, name))
        if isinstance(m, torch.nn.Dropout):
            found.setdefault("Dropout", []).append(m.p)
        cfg = getattr(m, "cfg", None)
        if cfg is not None and type(cfg).__name__ == "BlockConfig":
            found.setdefault("block.hidden_dropout", []).append(cfg.hidden_dropout)
    assert {"block.hidden_dropout", "SelfAttention.dropout", "InputEmbeddings.dropout"} <= set(found), found
    assert any(k.endswith("Head.dropout_p") for k in found), found
    return {r for rates in found.values() for r in rates}


def test_dropout_setting_replaces_every_dropout_of_backbone_and_head(model_dir, tmp_path):
    from muppets.transfer.finetune import _setup

    data = text_task("classify", n=8)

    def rates(**kw) -> set[float]:
        return dropout_rates(_setup(cfg_for(model_dir, tmp_path, **kw), data, 0).model)

    saved = json.loads((model_dir / "config.json").read_text())["hidden_dropout_prob"]
    assert rates() == {saved}  # -1: the checkpoint's own
    assert rates(dropout=0.0) == {0.0} and rates(dropout=0.3) == {0.3}
    with pytest.raises(Exception, match="dropout"):
        cfg_for(model_dir, tmp_path, dropout=1.5)


def test_model_may_be_a_pretraining_run_dir(model_dir, tmp_path):
    from muppets.errors import ConfigError
    from muppets.transfer.finetune import resolve_model
    import shutil
    run_dir = tmp_path / "pretrain-run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")  # the run's own config, not a model
    with pytest.raises(ConfigError, match="safetensors"):
        resolve_model(str(run_dir))
    shutil.copytree(model_dir, run_dir / "final")
    assert resolve_model(str(run_dir)) == run_dir / "final"
    assert resolve_model(str(model_dir)) == model_dir


def test_mean_pooling_trains_saves_and_predicts(model_dir, tmp_path):
    from muppets.heads import mean_tokens
    from muppets.nn.encoded import Encoded
    hidden = torch.arange(12, dtype=torch.float).view(1, 4, 3)
    enc = Encoded([hidden], torch.tensor([[True, True, False, False]]))
    assert torch.equal(mean_tokens(enc), hidden[0, :2].mean(0, keepdim=True))
    data = text_task("classify")
    summary = run(cfg_for(model_dir, tmp_path, epochs=6, lr=1e-2, pool="mean"), data=data)
    assert summary["dev"]["accuracy"] >= 0.9
    pred = Predictor(tmp_path / "best")
    assert pred.model.head.vector.pool == "mean" and pred.model.head.pooler is None
    saved = [json.loads(x)["prediction"] for x in (tmp_path / "predictions.jsonl").read_text().splitlines()
             if json.loads(x)["split"] == "dev"]
    assert pred.predict([ex.text for ex in data["dev"]]) == saved
    with pytest.raises(Exception, match="pool"):
        cfg_for(model_dir, tmp_path, pool="median")


def test_positions_beyond_the_pretraining_length_are_warned_about(tmp_path, caplog):
    from muppets.transfer.finetune import FinetuneConfig, warn_untrained_positions

    (tmp_path / "muppets_config.json").write_text(json.dumps({"data": {"max_seq_len": 128}}))
    with caplog.at_level(logging.WARNING, logger="muppets.transfer.finetune"):
        assert warn_untrained_positions(FinetuneConfig(max_seq_len=128), tmp_path) == 128
        assert not caplog.text
        warn_untrained_positions(FinetuneConfig(max_seq_len=384), tmp_path)
        assert "positions 128-383 were never trained" in caplog.text
        caplog.clear()
        assert warn_untrained_positions(FinetuneConfig(max_seq_len=384, init="random"), tmp_path) is None
        assert warn_untrained_positions(FinetuneConfig(max_seq_len=384), tmp_path / "hf") is None  # not ours
    assert not caplog.text
