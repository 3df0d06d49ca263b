"""``muppets weak analyze`` and ``muppets weak label`` on a small text file (no shared data)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from muppets.cli import main
from muppets.errors import ConfigError

LFS = '''
from muppets.weak import keyword_lf, length_lf
LFS = [keyword_lf("kw_my", ["my"], 1), keyword_lf("kw_song", ["song"], 0),
       length_lf("short", 0, below=3)]
'''


def test_analyze_and_label_a_text_file(tmp_path, capsys) -> None:
    lfs, texts = tmp_path / "lfs.py", tmp_path / "texts.txt"
    lfs.write_text(LFS, encoding="utf-8")
    texts.write_text("check my channel now\nnice song\n\nlove this song my friend\nok\n",
                     encoding="utf-8")
    png = tmp_path / "lfs.png"
    assert main(["weak", "analyze", str(lfs), "--task", str(texts), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "4 examples, 3 LFs" in out and "kw_song" in out and png.stat().st_size > 1000
    assert "one-sided" in out and "--class-balance" in out  # each LF votes one class
    labels = tmp_path / "labels.jsonl"
    for model in ("majority", "dawid-skene", "snorkel"):
        argv = ["weak", "label", str(lfs), "--task", str(texts), "--model", model,
                "--out", str(labels), "--overwrite", "--cache-dir", str(tmp_path / "cache")]
        assert main(argv) == 0
        rows = [json.loads(line) for line in labels.read_text(encoding="utf-8").splitlines()]
        assert [r["id"] for r in rows] == ["texts.txt:1", "texts.txt:2", "texts.txt:4",
                                           "texts.txt:5"]
        assert all(set(r) == {"id", "text", "probs", "label", "votes"} for r in rows)
        assert rows[0]["label"] == "1" and rows[1]["label"] == "0"
        assert abs(sum(rows[2]["probs"].values()) - 1) < 1e-5


def test_errors_are_reported_not_raised(tmp_path, capsys) -> None:
    lfs, texts = tmp_path / "lfs.py", tmp_path / "texts.txt"
    lfs.write_text("from muppets.weak import LabelingFunction\n"
                   "LFS = [LabelingFunction('seven', lambda x: 7)]\n", encoding="utf-8")
    texts.write_bytes(b"fine\n")
    assert main(["weak", "analyze", str(lfs), "--task", str(texts), "--plot", ""]) == 2
    assert "'seven' on example 0" in capsys.readouterr().err
    texts.write_bytes(b"fine\nbad \xfe\n")
    assert main(["weak", "analyze", str(lfs), "--task", str(texts), "--plot", ""]) == 2
    assert f"{texts}:2" in capsys.readouterr().err
    assert main(["weak", "label", str(lfs), "--task", str(texts), "--out",
                 str(tmp_path / "x.jsonl"), "--model", "majority"]) == 2


def test_label_with_a_fixed_or_labelled_class_balance(tmp_path, capsys) -> None:
    import numpy as np

    from muppets.errors import ConfigError
    from muppets.weak.pipeline import class_balance

    lfs, texts = tmp_path / "lfs.py", tmp_path / "texts.txt"
    lfs.write_text(LFS, encoding="utf-8")
    texts.write_text("check my channel now\nnice song\nlove this song my friend\nok\n", encoding="utf-8")
    labels = tmp_path / "labels.jsonl"
    shares = {}
    for spec in ("uniform", "0.2,0.8", "learned"):
        argv = ["weak", "label", str(lfs), "--task", str(texts), "--class-balance", spec,
                "--out", str(labels), "--overwrite"]
        assert main(argv) == 0
        rows = [json.loads(line) for line in labels.read_text(encoding="utf-8").splitlines()]
        shares[spec] = rows[2]["probs"]["1"]  # a comment both keyword LFs vote on, in conflict
    assert shares["0.2,0.8"] > shares["uniform"]  # the prior moves a conflicted vote
    texts.write_text("check my channel now\nnice song\nlove this song my friend\nno keyword in this one\n",
                     encoding="utf-8")
    for model in ("majority", "dawid-skene"):  # every label model takes a fixed balance
        assert main(["weak", "label", str(lfs), "--task", str(texts), "--model", model, "--keep-uncovered",
                     "--class-balance", "0.2,0.8", "--out", str(labels), "--overwrite"]) == 0
        rows = [json.loads(line) for line in labels.read_text(encoding="utf-8").splitlines()]
        assert rows[3]["votes"] == 0 and rows[3]["label"] == "1"
        if model == "majority":  # no vote: the given balance (Dawid-Skene also reads the abstains)
            assert rows[3]["probs"] == {"0": 0.2, "1": 0.8}
    assert main(["weak", "label", str(lfs), "--task", str(texts), "--model", "majority", "--keep-uncovered",
                 "--out", str(labels), "--overwrite"]) == 0
    rows = [json.loads(line) for line in labels.read_text(encoding="utf-8").splitlines()]
    assert rows[3]["label"] is None and rows[2]["label"] is None  # no vote, and a tie: no label
    assert "no label 50.0% (majority vote: a tie or no vote" in capsys.readouterr().out
    assert np.allclose(class_balance("1,3", "x"), [0.25, 0.75])
    assert np.allclose(class_balance("from:dev", "spam"), [0.46, 0.54])  # the tutorial's 100 labelled comments
    for bad in ("0.5", "a,b", "0,1", "nan,1", "inf,1"):
        try:
            class_balance(bad, "x")
        except ConfigError as err:
            assert "--class-balance" in str(err)
        else:
            raise AssertionError(bad)


def test_a_table_given_as_the_text_file_is_refused(tmp_path) -> None:
    from muppets.weak.pipeline import load_weak_input

    table = tmp_path / "spam.csv"
    table.write_text("COMMENT_ID,AUTHOR,CONTENT,CLASS\n1,a,check out my channel,1\n")
    with pytest.raises(ConfigError, match=r"spam\.csv: a \.csv file would be read as plain text"):
        load_weak_input(str(table))
    texts = tmp_path / "texts.txt"
    texts.write_text("check out my channel\nnice song\n")
    assert len(load_weak_input(str(texts)).examples) == 2


def test_written_labels_and_matrices_get_the_usual_permissions(tmp_path) -> None:
    import os

    from muppets.config import atomic_path

    mask = os.umask(0o022)
    try:
        with atomic_path(tmp_path / "labels.jsonl") as tmp:
            tmp.write_text("{}\n")
    finally:
        os.umask(mask)
    assert (tmp_path / "labels.jsonl").stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["labels.jsonl"]


def test_a_missing_text_file_is_named_as_a_file_not_an_unknown_task(tmp_path) -> None:
    from muppets.weak.pipeline import load_weak_input

    with pytest.raises(ConfigError, match=r"mytexts\.txt: no such file"):
        load_weak_input(str(tmp_path / "mytexts.txt"))


def test_label_refuses_its_output_and_a_bad_balance_before_any_lf_runs(tmp_path, capsys, monkeypatch) -> None:
    import muppets.weak

    lfs, texts, out = tmp_path / "lfs.py", tmp_path / "texts.txt", tmp_path / "labels.jsonl"
    lfs.write_text(LFS, encoding="utf-8")
    texts.write_text("check my channel now\nnice song\n", encoding="utf-8")
    out.write_text("mine\n")

    def never(*args, **kwargs):
        raise AssertionError("the LFs ran before the refusal")

    monkeypatch.setattr(muppets.weak, "apply_lfs", never)
    assert main(["weak", "label", str(lfs), "--task", str(texts), "--out", str(out)]) == 2
    assert "labels.jsonl exists: pass --overwrite" in capsys.readouterr().err
    assert main(["weak", "label", str(lfs), "--task", str(texts), "--out", str(tmp_path / "new.jsonl"),
                 "--class-balance", "0.2"]) == 2
    assert "need 2 positive finite shares" in capsys.readouterr().err
    assert out.read_text() == "mine\n" and not (tmp_path / "new.jsonl").exists()
    monkeypatch.undo()  # the LFs may run now
    monkeypatch.chdir(tmp_path)
    assert main(["weak", "analyze", str(lfs), "--task", str(texts)]) == 0  # no --plot: no picture written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.jsonl", "lfs.py", "texts.txt"]


# --- issue 51: rows no LF votes on, LF names in messages, the README's commands -----------------

UNCOVERED = "check my channel now\nnice song\nno keyword in this one at all\nok\n"


def test_label_drops_the_rows_no_lf_votes_on_unless_told_to_keep_them(tmp_path, capsys, caplog) -> None:
    from muppets.weak.pipeline import rows_to_write

    lfs, texts, out = tmp_path / "lfs.py", tmp_path / "texts.txt", tmp_path / "labels.jsonl"
    lfs.write_text(LFS, encoding="utf-8")
    texts.write_text(UNCOVERED, encoding="utf-8")
    with caplog.at_level("INFO", logger="muppets.weak.pipeline"):
        assert main(["weak", "label", str(lfs), "--task", str(texts), "--model", "dawid-skene", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == ["texts.txt:1", "texts.txt:2", "texts.txt:4"]  # line 3: no LF votes
    assert all(r["votes"] > 0 for r in rows)
    said = "dropped 1 of 4 rows with no LF vote (25.0%)"
    assert said in capsys.readouterr().out and said in caplog.text and "--keep-uncovered" in caplog.text
    assert main(["weak", "label", str(lfs), "--task", str(texts), "--model", "dawid-skene", "--out", str(out),
                 "--overwrite", "--keep-uncovered"]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 4 and rows[2]["votes"] == 0 and "dropped" not in capsys.readouterr().out
    assert rows_to_write(np.array([[-1, 0], [-1, -1]])).tolist() == [True, False]
    assert rows_to_write(np.array([[-1, 0], [-1, -1]]), keep_uncovered=True).tolist() == [True, True]
    with pytest.raises(ConfigError, match="no LF votes on any of the 2 rows"):
        rows_to_write(np.full((2, 3), -1))


def test_task_split_writes_a_labelled_split_finetune_reads(tmp_path, capsys) -> None:
    from muppets.tasks import load_task, read_table
    from muppets.tasks.spec import TextExample
    from muppets.tasks.table import write_table

    out = tmp_path / "valid.csv"
    assert main(["data", "task-split", "spam", "--split", "valid", "--out", str(out)]) == 0
    assert "wrote 120 labelled examples of spam/valid" in capsys.readouterr().out
    valid = load_task("spam")["valid"]
    back = read_table({"dev": out}, "classify", {"text": "text", "label": "label", "id": "id"})["dev"]
    assert [(ex.id, ex.text, ex.label) for ex in back] == [(ex.id, ex.text.strip(), ex.label) for ex in valid]
    assert main(["data", "task-split", "spam", "--split", "valid", "--out", str(out)]) == 2  # not overwritten
    assert main(["data", "task-split", "spam", "--split", "nope", "--out", str(tmp_path / "x.csv")]) == 2
    assert "has no split 'nope'" in capsys.readouterr().err
    pair = [TextExample("a", "one", "two", "1", "f:1"), TextExample("b", 'say "hi",\nthen', "x", "0", "f:2")]
    assert write_table(pair, "pair", tmp_path / "p.jsonl") == 2
    again = read_table(tmp_path / "p.jsonl", "pair", {"text": "text", "text_b": "text_b", "label": "label"},
                       fmt="auto")["train"]
    assert [(ex.text, ex.text_b, ex.label) for ex in again] == [("one", "two", "1"), ('say "hi",\nthen', "x", "0")]
    for bad, kind, match in ((pair, "tag", "only classify, pair and regress"), (pair, "pair", r"\.csv or \.jsonl"),
                             ([TextExample("c", "t", None, None, "f:3")], "classify", "c .f:3. has no label")):
        with pytest.raises(ConfigError, match=match):
            write_table(bad, kind, tmp_path / ("x.tsv" if match.startswith("\\") else "x.csv"))


def _tutorial_commands() -> list[str]:
    """The ``muppets`` commands of the weak-supervision tutorial's bash blocks, in order, but those
    on ``my_lfs.py`` (a file the page's Python block writes)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _markdown_runner import ROOT, bash_commands, markdown_blocks

    blocks = markdown_blocks(ROOT / "docs" / "tutorials" / "weak-supervision.md")
    commands = [c for b in blocks if b.lang == "bash" for c in bash_commands(b.text)]
    return [c for c in commands if c.startswith("muppets ") and "my_lfs.py" not in c]


def test_the_tutorial_weak_supervision_commands_run_as_written(tmp_path, monkeypatch, capsys, caplog) -> None:
    """Every command of the weak-supervision tutorial (docs/tutorials/weak-supervision.md), from a
    fresh directory; finetune on a tiny random BERT for a few steps instead of MiniLM."""
    import shlex
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _tiny_backbones import tiny_bert

    commands = _tutorial_commands()
    assert [c.split()[1:3] for c in commands] == [
        ["data", "task-split"], ["weak", "analyze"], ["weak", "label"], ["weak", "label"], ["data", "task-split"],
        ["data", "task-split"], ["finetune", "runs/weak/spam.jsonl"], ["finetune", "runs/weak/spam-dev.jsonl"]]
    tiny = tiny_bert(tmp_path / "tiny-bert")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "examples").symlink_to(Path(__file__).resolve().parents[1] / "examples")
    monkeypatch.chdir(tmp_path / "work")
    for command in commands:
        argv = shlex.split(command)[1:]
        if argv[0] == "finetune":
            argv[argv.index("--model") + 1] = str(tiny)
            argv += ["epochs=1", "max_train_examples=64", "max_seq_len=32", "batch_size=16", "progress=false",
                     "device=cpu"]
        with caplog.at_level("INFO"):
            assert main(argv) == 0, command
    out = capsys.readouterr().out
    assert "dropped 424 of 1,586 rows with no LF vote (26.7%)" in out
    assert "keyword_http's votes for class 1 count for next to nothing" in caplog.text
    assert not re.search(r"\bLFs? \d", caplog.text)
    rows = [json.loads(line) for line in open("runs/weak/spam.jsonl", encoding="utf-8")]
    assert len(rows) == 1162 and min(r["votes"] for r in rows) == 1
    metrics = json.loads(Path("runs/finetune/spam/metrics.json").read_text())
    assert {"dev", "test"} <= set(metrics) and Path("lfs.png").stat().st_size > 1000
    assert "wrote 1,162 labels (snorkel) of spam/train to runs/weak/spam-dev.jsonl" in out
    assert {"dev", "test"} <= set(json.loads(Path("runs/finetune/spam-dev/metrics.json").read_text()))
