"""The main job's parts (``configs/quickstart.yaml``: pretraining, then ``transfer``): the
majority-class and unigram baselines, the fine-tuning of final/ beside a random initialisation
of it (:mod:`muppets.transfer.pretraining_gain`), what it prints, and the pictures' baseline lines
and curves. The README test runs the whole job at tiny settings."""

from __future__ import annotations

import math
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _tiny_backbones import tiny_bert  # noqa: E402

from muppets.config import from_dict, load_typed  # noqa: E402
from muppets.errors import ConfigError  # noqa: E402
from muppets.recipes.pretraining import baseline_lines  # noqa: E402
from muppets.tasks.spec import TagExample, TaskData, TaskSpec, TextExample  # noqa: E402
from muppets.train.plots import Series, comparison_panels, plan_panels, render  # noqa: E402
from muppets.transfer import pretraining_gain  # noqa: E402
from muppets.transfer.pretraining_gain import (TransferSection, majority_baseline, next_commands,  # noqa: E402
                                               report_lines)

NER = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def _tag(i: int, words: str, tags: str) -> TagExample:
    return TagExample(f"s{i}", words.split(), tags.split(), "toy")


# ------------------------------------------------------------------ baselines


def test_majority_class_of_a_classify_task_scores_its_share_of_the_split() -> None:
    spec = TaskSpec("toy", "classify", ["0", "1"], "accuracy", ("text",))
    train = [TextExample(f"t{i}", "x", None, label, "toy") for i, label in enumerate("1101")]  # 1 is the majority
    dev = [TextExample(f"d{i}", "x", None, label, "toy") for i, label in enumerate("10000")]
    assert majority_baseline(spec, train, dev) == ("1", {"accuracy": 0.2})  # 1 of the 5 dev labels is 1


def test_a_tie_goes_to_the_label_listed_first() -> None:
    spec = TaskSpec("toy", "classify", ["neg", "pos"], "accuracy", ("text",))
    train = [TextExample("a", "x", None, "pos", "toy"), TextExample("b", "x", None, "neg", "toy")]
    assert majority_baseline(spec, train, train)[0] == "neg"


def test_majority_tag_of_ner_is_o_and_scores_entity_f1_zero_and_of_pos_its_token_share() -> None:
    train = [_tag(0, "john went to paris", "B-PER O O B-LOC"), _tag(1, "mary stayed", "B-PER O")]
    test = [_tag(2, "john saw mary", "B-PER O B-PER")]
    label, metrics = majority_baseline(TaskSpec("toy", "tag", NER, "entity_f1", ("tokens",)), train, test)
    assert label == "O" and metrics["f1"] == 0.0 and metrics["precision"] == 0.0  # no entity predicted
    pos = TaskSpec("pos", "tag", ["DT", "NN", "VB"], "token_accuracy", ("tokens",))
    train = [_tag(0, "the dog runs", "DT NN VB"), _tag(1, "a cat", "DT NN"), _tag(2, "dogs", "NN")]
    test = [_tag(3, "the cat sleeps now", "DT NN VB NN")]  # NN (4 of 6 training words) is right 2 of 4 times
    assert majority_baseline(pos, train, test) == ("NN", {"accuracy": 0.5})


def test_majority_baseline_refuses_a_kind_it_cannot_score() -> None:
    spec = TaskSpec("toy", "regress", [], "pearson_spearman", ("text",))
    with pytest.raises(ConfigError, match="majority class"):
        majority_baseline(spec, [TextExample("a", "x", None, 1.0, "toy")], [])


def test_the_unigram_baseline_becomes_the_pictures_lines_loss_included() -> None:
    lines = baseline_lines({"mlm_accuracy": 0.06, "mlm_perplexity": 400.0, "nsp_accuracy": 0.51})
    assert lines["mlm_accuracy"] == ("unigram: the most frequent token", 0.06)
    assert lines["nsp_accuracy"] == ("majority class", 0.51)
    assert lines["mlm_perplexity"] == ("unigram distribution", 400.0)
    assert lines["mlm_loss"][0] == "unigram distribution" and lines["mlm_loss"][1] == pytest.approx(math.log(400.0))


# ------------------------------------------------------------------ pictures


def _log(values: list[float], key: str = "eval/mlm_accuracy", every: int = 10) -> list[dict]:
    records = [{"step": s, "loss": 8.0 - s / 50} for s in range(1, every * len(values) + 1)]
    return records + [{"step": every * (i + 1), key: v} for i, v in enumerate(values)]


def test_training_curves_have_several_points_and_the_baseline_as_a_line() -> None:
    panels = {p.title: p for p in plan_panels(_log([0.05, 0.07, 0.09]), baselines=baseline_lines({"mlm_accuracy": 0.06}))}
    curve, line = panels["mlm_accuracy"].series
    assert curve.values.tolist() == [0.05, 0.07, 0.09] and curve.steps.tolist() == [10, 20, 30]
    assert (line.style, line.label, line.values.tolist()) == ("baseline", "unigram: the most frequent token", [0.06])
    assert [s.style for s in panels["training loss"].series] == ["smooth"]  # no baseline where none is known
    ax = render(list(panels.values())).axes[1]
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == 1 and list(dashed[0].get_ydata()) == [0.06, 0.06]  # across the panel
    assert "unigram: the most frequent token" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_the_comparison_draws_one_line_per_run_and_the_majority_class() -> None:
    runs = {"pretrained": _log([0.3, 0.5, 0.6], "eval/dev/f1"), "random init": _log([0.1, 0.2, 0.3], "eval/dev/f1")}
    for records in runs.values():
        records.append({"step": 30, "eval/dev/precision": 0.5})
    panels = comparison_panels(runs, {"f1": ("majority class (O)", 0.0)}, metrics=["dev/f1"])
    assert [p.title for p in panels] == ["training loss", "dev f1"]  # precision left out
    assert [s.label for s in panels[0].series] == ["pretrained", "random init"]
    assert [(s.label, s.style, len(s.values)) for s in panels[1].series] == [
        ("pretrained", "points", 3), ("random init", "points", 3), ("majority class (O)", "baseline", 1)]
    assert Series.baseline("x", 0.25).steps.size == 0


# ------------------------------------------------------------------ the transfer section


@pytest.mark.parametrize("key", ["model", "init", "run_dir", "selection", "watch_dev", "task"])
def test_the_transfer_refuses_settings_it_makes_itself(key: str) -> None:
    value = {"model": "minilm2", "init": "random", "run_dir": "x", "selection": "dev", "watch_dev": True,
             "task": {"name": "sst2"}}[key]
    with pytest.raises(ConfigError, match=f"finetune.{key}"):
        from_dict(TransferSection, {"task": "conll2003", "finetune": {key: value}})


def test_the_quickstart_config_loads_with_its_transfer() -> None:
    from muppets.recipes import bert_pretrain

    cfg = bert_pretrain.load_config(HERE.parent / "configs" / "quickstart.yaml", [])
    assert cfg.transfer.task == "conll2003" and cfg.train.eval_every > 0
    assert cfg.train.steps // cfg.train.eval_every >= 5  # curves, not dots
    both = {init: pretraining_gain.finetune_config(cfg.transfer, Path("r/final"), Path("r/t"), init, "cpu")
            for init in pretraining_gain.INITS}
    assert (both["random"].init, both["pretrained"].init) == ("random", "pretrained")
    assert both["random"].selection == "last" and both["random"].watch_dev
    differ = {k for k, v in vars(both["random"]).items() if vars(both["pretrained"])[k] != v}
    assert differ == {"init", "run_dir"}  # the same examples, steps, lr and seed


def _result() -> dict:
    return {"task": "conll2003", "metric": "f1", "split": "test",
            "scored_on": {"split": "test", "examples": 3453, "of": 3453, "selected_on": False, "source": ""},
            "train_examples": 2000, "steps": 126, "epochs": 2, "seed": 1, "pretrained": 0.41234,
            "random": 0.30001, "majority": 0.0, "majority_label": "O", "gain": 0.11233,
            "runs": {"pretrained": "runs/quickstart/transfer/conll2003/pretrained"}}


def test_the_printout_sets_each_figure_beside_its_baselines() -> None:
    lines = report_lines(_result())
    assert "3,453 examples), which chose nothing" in lines[0] and "126 steps (2 epochs)" in lines[0]
    assert [line.split()[-1] for line in lines[1:6]] == ["f1", "0.4123", "0.3000", "0.0000", "+0.1123"]
    assert lines[4].lstrip().startswith("majority class (O)")
    assert "docs/results/main-job.md" in lines[-1]


def test_the_next_commands_parse_and_name_the_runs_outputs() -> None:
    from muppets.cli import build_parser

    commands = next_commands("runs/quickstart", _result())
    assert len(commands) == 5
    for command in commands:
        words = shlex.split(command, comments=True)
        assert words[0] == "muppets"
        build_parser().parse_args(words[1:])  # a typo in a printed command would exit here
    assert any("transfer/conll2003/pretrained/best" in c for c in commands)
    assert len(next_commands("runs/quickstart", None)) == 4  # no fine-tuned model to serve


# ------------------------------------------------------------------ the transfer itself


def _toy_ner() -> TaskData:
    rng = np.random.default_rng(0)
    names, filler = ["john", "mary", "paris", "london"], ["the", "a", "river", "bank", "went", "to", "and"]

    def sentence(i: int) -> TagExample:
        words = list(rng.choice(names + filler, 6))
        tags = ["B-PER" if w in ("john", "mary") else "B-LOC" if w in ("paris", "london") else "O" for w in words]
        return TagExample(f"s{i}", words, tags, "toy")

    splits = {"train": [sentence(i) for i in range(16)], "dev": [sentence(i) for i in range(16, 22)],
              "test": [sentence(i) for i in range(22, 30)]}
    return TaskData(TaskSpec("toy-ner", "tag", NER, "entity_f1", ("tokens",)), splits)


def test_the_transfer_fine_tunes_final_and_a_random_initialisation_alike(tmp_path: Path) -> None:
    tiny_bert(tmp_path / "final")
    sec = load_typed(TransferSection, None, ["task=toy-ner", "finetune.epochs=1", "finetune.batch_size=8",
                                             "finetune.max_seq_len=32", "finetune.eval_every=1", "finetune.lr=1e-3",
                                             "finetune.progress=false", "finetune.threads=1"])
    result = pretraining_gain.run(sec, tmp_path, "cpu", _toy_ner())
    out = tmp_path / "transfer" / "toy-ner"
    assert result["split"] == "test" and result["scored_on"]["examples"] == 8 and result["steps"] == 2
    assert result["majority"] == 0.0 and result["majority_label"] == "O"
    assert result["gain"] == pytest.approx(result["pretrained"] - result["random"])
    assert (out / "transfer_curves.png").is_file() and result["curves"] == str(out / "transfer_curves.png")
    start = load_file(tmp_path / "final" / "model.safetensors")
    key = next(k for k in start if k.endswith("word_embeddings.weight"))
    after = {init: load_file(out / init / "best" / "model.safetensors") for init in pretraining_gain.INITS}
    moved = {init: float(np.abs(next(v for k, v in w.items() if k.endswith("word_embeddings.weight")) - start[key]).max())
             for init, w in after.items()}
    assert moved["pretrained"] < 0.05 < moved["random"]  # two updates from final/; the other from fresh weights
    stamp = (out / "pretrained" / "log.jsonl").stat().st_mtime_ns
    assert pretraining_gain.run(sec, tmp_path, "cpu", _toy_ner()) == result  # the same settings: reused
    assert (out / "pretrained" / "log.jsonl").stat().st_mtime_ns == stamp
    other = load_typed(TransferSection, None, ["task=toy-ner", "finetune.epochs=1", "finetune.batch_size=16",
                                               "finetune.max_seq_len=32", "finetune.progress=false"])
    assert pretraining_gain.run(other, tmp_path, "cpu", _toy_ner())["steps"] == 1  # other settings: run again


def test_the_gain_benchmark_pairs_the_two_runs_of_each_seed() -> None:
    sys.path.insert(0, str(HERE.parent / "benchmarks"))
    import main_job_gain

    rows = [{"pretrained": 0.30, "random": 0.26, "majority": 0.0}, {"pretrained": 0.31, "random": 0.25, "majority": 0.0},
            {"pretrained": 0.29, "random": 0.30, "majority": 0.0}]
    t = main_job_gain.table(rows)
    diff = t["pretrained_minus_random"]
    assert diff["mean"] == pytest.approx((0.04 + 0.06 - 0.01) / 3) and (diff["wins"], diff["losses"]) == (2, 1)
    assert diff["std"] == pytest.approx(float(np.std([0.04, 0.06, -0.01], ddof=1)))
    assert t["random"]["values"] == [0.26, 0.25, 0.30] and t["majority"]["mean"] == 0.0


def test_a_finished_pretraining_asked_again_with_other_transfer_settings_trains_nothing_new() -> None:
    from muppets.recipes.bert_pretrain import PretrainConfig
    from muppets.train.rundir import effective_changes

    changed = {"transfer.finetune.lr": (1e-3, 5e-4), "transfer.task": ("conll2003", "sst2"), "train.lr": (1e-3, 2e-3)}
    assert effective_changes(changed, PretrainConfig.AFTER_TRAINING) == {"train.lr": (1e-3, 2e-3)}
    assert effective_changes({"transfers": (1, 2)}, ("transfer.",)) == {"transfers": (1, 2)}  # a section, not a prefix
