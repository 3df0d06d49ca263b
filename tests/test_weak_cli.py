"""``muppets weak analyze`` and ``muppets weak label`` on a small text file (no shared data)."""

from __future__ import annotations

import json

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
        assert main(["weak", "label", str(lfs), "--task", str(texts), "--model", model,
                     "--class-balance", "0.2,0.8", "--out", str(labels), "--overwrite"]) == 0
        rows = [json.loads(line) for line in labels.read_text(encoding="utf-8").splitlines()]
        assert rows[3]["votes"] == 0 and rows[3]["label"] == "1"
        if model == "majority":  # no vote: the given balance (Dawid-Skene also reads the abstains)
            assert rows[3]["probs"] == {"0": 0.2, "1": 0.8}
    assert main(["weak", "label", str(lfs), "--task", str(texts), "--model", "majority",
                 "--out", str(labels), "--overwrite"]) == 0
    rows = [json.loads(line) for line in labels.read_text(encoding="utf-8").splitlines()]
    assert rows[3]["label"] is None and rows[2]["label"] is None  # no vote, and a tie: no label
    assert "no label 50.0%" in capsys.readouterr().out
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
