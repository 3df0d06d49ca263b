"""Outputs say what they scored (issue 51, item 7): every figure ``muppets finetune`` /
``evaluate`` prints names its split and size, the selection says what chose the model
("selected on"), the evaluation lines of ``training_curves.png`` and the log name their
examples, and predictions that are one label or one tag throughout get a note."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from _tiny_backbones import tiny_bert

from muppets.cli import main as cli_main
from muppets.tasks import read_conll
from muppets.train import read_log
from muppets.train.plots import plan_panels
from muppets.transfer.models import load_tokenizer, new_task_model, save_task_model
from muppets.transfer.report import Scored, figure_lines, header_line, one_answer_note

POS, NEG, FILLER = ["good", "great"], ["bad", "awful"], ["the", "movie", "film", "plot", "was"]
SETTINGS = ["epochs=2", "batch_size=4", "max_seq_len=32", "progress=false", "device=cpu", "lr=1e-3"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("bert"))


def write_csv(path: Path, n: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    rows = ["text,label"]
    for i in range(n):
        words = [*rng.choice(POS if i % 2 else NEG, 2), *rng.choice(FILLER, 2)]
        rows.append(f"{' '.join(rng.permutation(words))},{i % 2}")
    path.write_text("\n".join(rows) + "\n")
    return path


def figures(out: str) -> list[str]:
    """The printed lines that carry a figure (a number with four decimals at the end)."""
    return [line for line in out.splitlines() if re.search(r"\d\.\d{4}$", line)]


def test_finetune_and_evaluate_name_split_size_and_selection(bert_dir, tmp_path, capsys, caplog):
    train, dev = write_csv(tmp_path / "train.csv", 24, 0), write_csv(tmp_path / "dev.csv", 12, 1)
    run_dir = tmp_path / "r"
    with caplog.at_level(logging.INFO, logger="muppets.train.trainer"):
        assert cli_main(["finetune", str(train), "--dev", str(dev), "--model", str(bert_dir),
                         f"run_dir={run_dir}", "max_eval_examples=6", *SETTINGS]) == 0
    out = capsys.readouterr().out
    summary = json.loads((run_dir / "metrics.json").read_text())
    chosen = summary["selected_on"]
    assert chosen["split"] == "train-slice" and chosen["of"] == 24 and chosen["examples"] == summary["selection_examples"]
    assert f"best step {summary['best_step']} selected on train-slice ({chosen['examples']} of 24 train examples)" in out
    assert f"accuracy {summary['best_selection_score']:.4f} there" in out
    assert summary["scored_on"]["dev"] == {"split": "dev", "examples": 6, "of": 12, "selected_on": False, "source": ""}
    lines = figures(out)
    assert lines and all(line.lstrip().startswith("dev (6 of 12 examples)") for line in lines)
    assert f"{summary['dev']['accuracy']:10.4f}" in out
    assert any(f"(metrics on train-slice ({chosen['examples']} of 24 train examples, selected on))" in r.getMessage()
               for r in caplog.records)  # the evaluation log line names what it scored
    panel = next(p for p in plan_panels(read_log(run_dir), {"": Scored.from_dict(chosen).describe()})
                 if p.title == "accuracy")
    assert panel.legend and [s.label for s in panel.series] == [Scored.from_dict(chosen).describe()]
    # with a labelled test split, dev chooses: its figures say so, test's do not
    test = write_csv(tmp_path / "test.csv", 8, 2)
    assert cli_main(["finetune", str(train), "--dev", str(dev), "--test", str(test), "--model", str(bert_dir),
                     f"run_dir={tmp_path / 'r2'}", *SETTINGS]) == 0
    out = capsys.readouterr().out
    assert re.search(r"best step \d+ selected on dev \(12 examples\)", out)
    lines = figures(out)
    assert {line.split(")")[0].strip() + ")" for line in lines} == {"dev (12 examples, selected on)", "test (8 examples)"}
    assert cli_main(["evaluate", str(train), "--dev", str(dev), "--model", str(run_dir / "best"), "--split", "dev"]) == 0
    lines = figures(capsys.readouterr().out)
    assert lines and all(line.lstrip().startswith("dev (12 examples)") for line in lines)


def test_a_tagger_that_predicts_only_o_gets_a_note(bert_dir, tmp_path, capsys):
    sentence = "john NNP B-PER\nwent VBD O\nto TO O\nparis NNP B-LOC\n"
    (tmp_path / "train.conll").write_text((sentence + "\n") * 4)
    (tmp_path / "dev.conll").write_text((sentence + "\n") * 3)
    spec = read_conll({"train": tmp_path / "train.conll"}).spec
    tok = load_tokenizer(bert_dir)
    torch.manual_seed(0)
    model = new_task_model(bert_dir, "tag", len(spec.labels), tok)
    with torch.no_grad():
        model.head.classifier.bias[spec.labels.index("O")] = 100.0  # every word O
    save_task_model(model, tmp_path / "tagger", tok, spec.labels)
    assert cli_main(["evaluate", str(tmp_path / "train.conll"), "--dev", str(tmp_path / "dev.conll"),
                     "--model", str(tmp_path / "tagger"), "--split", "dev", "max_seq_len=32"]) == 0
    out = capsys.readouterr().out
    assert all(line.lstrip().startswith("dev (3 examples)") for line in figures(out))
    assert {float(line.split()[-1]) for line in figures(out)} == {0.0}
    assert ("note: dev: every word of the 3 sentences is tagged 'O' (no entity predicted, so every entity "
            "score is 0)") in out


def test_one_answer_notes_and_summary_lines():
    assert one_answer_note("classify", "dev", ["0"] * 5, {"0": "negative"}).startswith(
        "dev: the model predicts 'negative' for all 5 examples")
    assert one_answer_note("classify", "dev", ["0", "1"]) is None and one_answer_note("classify", "dev", ["1"]) is None
    assert one_answer_note("tag", "test", [["NN", "NN"]]).startswith("test: every word of the 1 sentence is tagged 'NN':")
    assert one_answer_note("tag", "test", [["O", "B-PER"]]) is None
    summary = {"task": "sst2", "steps": 10, "stopped_early": False, "best_step": 10, "selected_on": None,
               "dev": {"accuracy": 0.475}, "scored_on": {"dev": Scored("dev", 200, 872).to_dict()},
               "notes": ["dev: the model predicts 'negative' for all 200 examples (a constant: …)"]}
    assert header_line(summary) == "sst2: 10 steps; no selection: the model after the last step is kept"
    assert figure_lines(summary) == ["  dev (200 of 872 examples)  accuracy             0.4750",
                                     "note: dev: the model predicts 'negative' for all 200 examples (a constant: …)"]
