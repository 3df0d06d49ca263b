"""Typed configs: from_dict, dotted overrides, file loading, error messages."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from muppets.config import ALLOW_NONFINITE, apply_overrides, from_dict, load_file, load_typed, to_dict, write_json_atomic
from muppets.errors import ConfigError, TrainingInterrupted
from muppets.train.trainer import TrainConfig


@dataclass
class Opt:
    lr: float = 1e-3
    steps: int = 10
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    name: str | None = None


@dataclass
class Run:
    tag: str = "x"
    fast: bool = False
    opt: Opt = field(default_factory=Opt)
    extra: dict = field(default_factory=dict)


def test_round_trip_and_nested_overrides():
    cfg = apply_overrides(Run(), ["opt.lr=0.5", "tag=demo", "opt.betas=[0.8, 0.9]", "extra={a: 1}",
                                  "fast=true", "opt.name=adam", "opt.steps=3"])
    assert cfg == Run(tag="demo", fast=True, opt=Opt(lr=0.5, steps=3, betas=[0.8, 0.9], name="adam"),
                      extra={"a": 1})
    assert from_dict(Run, to_dict(cfg)) == cfg


def test_scientific_notation_without_dot_is_a_float():
    assert apply_overrides(Run(), ["opt.lr=3e-4"]).opt.lr == 3e-4
    assert from_dict(Opt, {"lr": "1e-3"}).lr == 1e-3


@pytest.mark.parametrize("override, needle", [
    ("opt.lrr=1", "unknown key 'opt.lrr'.*valid keys: lr, steps, betas, name"),
    ("nope=1", "unknown key 'nope'.*valid keys: tag, fast, opt, extra"),
    ("opt.steps=abc", "opt.steps: expected an integer, got 'abc'"),
    ("opt.steps=1.5", "opt.steps: expected an integer"),
    ("fast=maybe", "fast: expected true/false"),
    ("opt.betas=3", "opt.betas: expected a list"),
    ("tag.x=1", "'tag' is a value, not a section"),
    ("novalue", "not of the form key=value"),
])
def test_override_errors_name_key_and_value(override, needle):
    with pytest.raises(ConfigError, match=needle):
        apply_overrides(Run(), [override])


def test_load_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_file(bad)
    with pytest.raises(ConfigError, match="missing.yaml"):
        load_file(tmp_path / "missing.yaml")
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_file(listy)


@pytest.mark.parametrize("name, content, needle", [
    ("dup.yaml", b"train:\n  steps: 3\ntrain:\n  lr: 1\n", r"dup\.yaml:3: .*'train' is written twice \(first on line 1\)"),
    ("dup.json", b'{\n "opt": {"lr": 1,\n\t"lr": 2}}', r"dup\.json:3: .*'lr' is written twice \(first on line 2\)"),
    ("empty.yaml", b"# only a comment\n", r"empty\.yaml: the config file is empty"),
    ("latin1.yaml", b"tag: x\nname: caf\xe9\n", r"latin1\.yaml:2 \(byte 16\): config file is not valid UTF-8"),
    ("bad.json", b'{"a": 1,,}', r"bad\.json:1: not valid JSON: .*column 9"),
    ("date.yaml", b"when: 2001-13-45\n", r"date\.yaml: not valid YAML: month must be in 1\.\.12"),
    ("deep.json", b'{"k": ' + b"[" * 600 + b"]" * 600 + b',\n"k": 1}', r"deep\.json: not valid JSON: the key 'k' is written twice"),
])
def test_load_file_refuses_what_yaml_would_read_silently_or_raw(tmp_path, name, content, needle):
    (tmp_path / name).write_bytes(content)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # Python's default: another test in this worker may have raised it, and deep.json
    try:  # must reach the path where YAML cannot locate the repeated key
        with pytest.raises(ConfigError, match=needle) as caught:
            load_file(tmp_path / name)
    finally:
        sys.setrecursionlimit(limit)
    assert "\n" not in str(caught.value)


def test_a_bad_value_is_traced_to_the_file_or_the_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("tag: demo\nopt: {steps: abc}\n")
    with pytest.raises(ConfigError, match=r"^.*run\.yaml:2: opt\.steps: expected an integer, got 'abc'$"):
        load_typed(Run, path, [])
    path.write_text("tag: demo\n")
    with pytest.raises(ConfigError, match=r"^opt\.steps: expected an integer, got 'x' \(with the overrides fast=true opt\.steps=x\)$"):
        load_typed(Run, path, ["fast=true", "opt.steps=x"])
    assert load_typed(Run, path, ["opt.steps=3"]) == Run(tag="demo", opt=Opt(steps=3))
    assert load_typed(Run, None, []) == Run()


@dataclass
class Task:
    name: str = ""
    weight: float = 1.0

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise ConfigError(f"weight: {self.weight} must be >= 0", key="weight")


@dataclass
class Many:
    opt: Opt = field(default_factory=Opt)
    tasks: list[Task] = field(default_factory=list)


@pytest.mark.parametrize("text, line, needle", [
    ("# a comment\nopt:\n  lr: 0.1\n  steps: abc\n", 4, "opt.steps: expected an integer"),
    ("opt:\n  lr: 0.1\n  stepz: 3\n", 3, "unknown key opt.stepz"),
    ("tasks:\n  - name: a\n  - name: b\n    weight: -1\n", 4, r"tasks\[1\]\.weight: -1\.0 must be >= 0"),
    ("tasks:\n  - name: a\n  - {name: b, weight: x}\n", 3, r"tasks\[1\]\.weight: expected a number"),
    ('{\n  "opt": {\n    "betas": 3\n  }\n}\n', 3, "opt.betas: expected a list"),
    ('{\n\t"opt": {\n\t\t"lr": 0.1,\n\t\t"betas": 3\n\t}\n}\n', 4, "opt.betas: expected a list"),  # tabs
    ("opt: 3\n", 1, "opt: expected a mapping"),
    ("tasks:\n  - name: |\n      \tx\n      y\n    weight: -1\n", 5, r"tasks\[0\]\.weight: -1\.0 must be >= 0"),  # a tab in YAML text
])
def test_a_bad_value_in_a_file_is_traced_to_its_line(tmp_path, text, line, needle):
    path = tmp_path / ("run.json" if text.startswith("{") else "run.yaml")
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"^{path}:{line}: {needle}") as caught:
        load_typed(Many, path, [])
    assert caught.value.key is not None


@dataclass
class Budget:
    lr: float = 1e-3
    steps: int = 10

    def __post_init__(self) -> None:
        if self.lr > 1 and self.steps > 5:
            raise ConfigError(f"steps: {self.steps} steps at lr {self.lr} diverge", key="steps")


def test_an_error_at_a_setting_the_file_does_not_write_names_the_file_alone(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("lr: 2.0\n")  # steps keeps its default
    with pytest.raises(ConfigError, match=rf"^{path}: steps: 10 steps at lr 2\.0 diverge$"):
        load_typed(Budget, path, [])


def test_write_json_atomic_leaves_no_temporary_files(tmp_path):
    write_json_atomic(tmp_path / "a" / "c.json", {"x": 1})
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["c.json"]
    assert (tmp_path / "a" / "c.json").stat().st_mode & 0o044  # readable by others (umask 022)


@dataclass
class Typed:
    run_dir: str = "runs"
    steps: int = 10
    lr: float = 1e-3
    fast: bool = False
    seed: int | None = None
    budget: float = field(default=0.0, metadata=ALLOW_NONFINITE)


@pytest.mark.parametrize("text", ["1.10", "010", "1:30", "1e3", "true", "null", "[1, 2]", "", " a b "])
def test_string_overrides_keep_the_literal_text(text):
    assert apply_overrides(Typed(), [f"run_dir={text}"]).run_dir == text


@dataclass
class Labelled:
    name: str = ""
    labels: list[str] = field(default_factory=list)
    note: str | None = None


@dataclass
class WithTask:
    run_dir: str = "runs"
    model: str = ""
    task: Labelled = field(default_factory=Labelled)
    steps: int = 10
    lr: float = 1e-3
    extra: dict = field(default_factory=dict)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_string_settings_in_a_file_keep_their_text(tmp_path, suffix):
    text = ('run_dir: 010\nmodel: 1.10\ntask:\n  name: 12:30\n  labels: ["1.0", 1.10]\n  note: 0x1F\n'
            'steps: 20\nlr: 1.50\nextra: {1: 2.50}\n' if suffix == ".yaml" else
            '{"run_dir": 10, "model": 1.10, "task": {"name": 1e3, "labels": ["1.0", 1.10], "note": 7}, '
            '"steps": 20, "lr": 1.50, "extra": {"a": 2.50}}')
    path = tmp_path / f"c{suffix}"
    path.write_text(text)
    cfg = load_typed(WithTask, path, [])
    assert (cfg.run_dir, cfg.model) == ("010" if suffix == ".yaml" else "10", "1.10")
    assert (cfg.task.name, cfg.task.labels) == ("12:30" if suffix == ".yaml" else "1e3", ["1.0", "1.10"])
    assert cfg.task.note == ("0x1F" if suffix == ".yaml" else "7")
    assert (cfg.steps, cfg.lr) == (20, 1.5) and type(cfg.steps) is int and type(cfg.lr) is float  # numbers stay numbers
    assert all(type(v) is float for v in cfg.extra.values())
    assert yaml.safe_dump(to_dict(cfg))  # nothing of the loader's own types is left to dump


@pytest.mark.parametrize("text, expected", [("1e3", 1000), ("010", 10), ("1.0", 1), ("-7", -7), ("2.5e1", 25),
                                            ("12345678901234567890123", 12345678901234567890123)])
def test_integer_overrides_accept_exactly_integral_numbers(text, expected):
    steps = apply_overrides(Typed(), [f"steps={text}"]).steps
    assert steps == expected and type(steps) is int


@pytest.mark.parametrize("text", ["1.5", "1e-3", "nan", "inf", "1:30", "true", "0x10", "1e400", "1e99999999"])
def test_integer_overrides_reject_other_values(text):
    with pytest.raises(ConfigError, match=f"steps: expected an integer, got '{text}'"):
        apply_overrides(Typed(), [f"steps={text}"])


def test_integer_fields_from_files_accept_scientific_notation():
    assert from_dict(Typed, {"steps": "1e3"}).steps == 1000  # YAML 1.1 reads 1e3 (no dot) as a string


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "NaN", "1e400"])
def test_float_overrides_reject_non_finite_values(text):
    with pytest.raises(ConfigError, match=f"lr: expected a finite number, got '{text}'"):
        apply_overrides(Typed(), [f"lr={text}"])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_float_fields_from_files_reject_non_finite_values(value):
    with pytest.raises(ConfigError, match="lr: expected a finite number"):
        from_dict(Typed, {"lr": value})


def test_a_float_field_may_opt_in_to_non_finite_values():
    assert apply_overrides(Typed(), ["budget=inf"]).budget == float("inf")
    assert from_dict(Typed, {"budget": float("-inf")}).budget == float("-inf")
    assert apply_overrides(Typed(), ["lr=1.10", "lr=2"]).lr == 2.0


@pytest.mark.parametrize("text, expected", [("true", True), ("False", False), ("1", True), ("0", False),
                                            ("yes", True), ("NO", False)])
def test_boolean_overrides(text, expected):
    assert apply_overrides(Typed(), [f"fast={text}"]).fast is expected


@pytest.mark.parametrize("text", ["2", "on", "maybe", ""])
def test_boolean_overrides_reject_other_words(text):
    with pytest.raises(ConfigError, match=f"fast: expected true/false, got '{text}'"):
        apply_overrides(Typed(), [f"fast={text}"])


@pytest.mark.parametrize("text, expected", [("null", None), ("~", None), ("", None), ("010", 10), ("1e3", 1000)])
def test_optional_overrides(text, expected):
    assert apply_overrides(Typed(seed=3), [f"seed={text}"]).seed == expected


def test_optional_override_error_names_key_and_value():
    with pytest.raises(ConfigError, match="seed: '1.5' matches none of int"):
        apply_overrides(Typed(), ["seed=1.5"])


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_shipped_config_loads_with_its_command(path: Path) -> None:
    """A shipped config with a wrong key or a stale setting fails here, not an hour into a run."""
    from muppets import multitask
    from muppets.recipes import pick_recipe, word2vec_train

    raw = yaml.safe_load(path.read_text())
    if "tasks" in raw:  # muppets multitask CONFIG
        multitask.load_config(path, [])
    elif "word2vec" in raw:  # muppets word2vec train CONFIG
        word2vec_train.load_config(path, [])
    else:  # muppets pretrain CONFIG
        pick_recipe(path, []).load_config(path, [])


@pytest.mark.parametrize("case, code, words", [
    ("a directory where the output goes", 2, "muppets: error: {tmp}/out.jsonl: Is a directory"),
    ("a file where a folder goes", 2, "muppets: error: {tmp}/afile: File exists"),
    ("ctrl-c", 130, "muppets: interrupted"),
    ("a signal that stopped a fine-tune", 130, "muppets: interrupted: stopped at step 3"),
])
def test_the_command_line_ends_a_path_in_the_way_or_ctrl_c_without_a_traceback(monkeypatch, capsys, tmp_path, case,
                                                                                  code, words):
    from muppets import cli
    from muppets.config import atomic_path

    (tmp_path / "out.jsonl").mkdir()
    (tmp_path / "afile").write_text("mine")

    def command(args):
        if case == "ctrl-c":
            raise KeyboardInterrupt
        if case.startswith("a signal"):  # `pretrain && finetune && evaluate` must not go on either
            raise TrainingInterrupted("stopped at step 3; run the same command again to resume")
        target = tmp_path / ("out.jsonl" if case.startswith("a directory") else "afile/x.json")
        with atomic_path(target) as tmp:  # what every output writer does
            tmp.write_text("{}")

    monkeypatch.setattr(cli, "_pretrain", command)
    assert cli.main(["pretrain", "train.steps=1"]) == code
    err = capsys.readouterr().err
    assert words.format(tmp=tmp_path) in err and "Traceback" not in err and ".tmp" not in err
    assert (tmp_path / "afile").read_text() == "mine" and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_atomic_path_removes_what_a_killed_write_of_the_same_file_left(tmp_path):
    import subprocess

    from muppets.config import _HOST_TAG, atomic_path

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs: the writer was killed mid-write
    here = f"h{_HOST_TAG}"
    left = tmp_path / f".labels.jsonl.a1b2c3d4.{here}.{dead.pid}.tmp"
    kept = [tmp_path / f".labels.jsonl.d4e5f6g7.{here}.{os.getppid()}.tmp",  # a live writer's
            tmp_path / f".labels.jsonl.a1b2c3d4.h000000.{dead.pid}.tmp",  # another host's: its pid means nothing here
            tmp_path / f".labels.jsonl.gz.a1b2c3d4.{here}.{dead.pid}.tmp",  # another file's (labels.jsonl.gz)
            tmp_path / ".labels.jsonl.bak.20240101120000.tmp"]  # the user's own, with a long number
    for path in (left, *kept):
        path.write_text("half")
    with atomic_path(tmp_path / "labels.jsonl") as tmp:
        assert tmp.name.startswith(".labels.jsonl.") and tmp.name.endswith(f".{here}.{os.getpid()}.tmp")
        tmp.write_text("done")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["labels.jsonl", *(p.name for p in kept)])


def test_atomic_dir_replaces_whole_or_not_at_all_and_clears_only_its_own_dead_leftovers(tmp_path):
    import subprocess

    from muppets.config import _HOST_TAG, atomic_dir

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs: the writer was killed
    here = f"h{_HOST_TAG}"
    half = tmp_path / f".tmp-model-{here}.{dead.pid}"
    moved_aside = tmp_path / f".old-model-{here}.{dead.pid}"  # killed between its renames: the only copy
    kept = [tmp_path / f".tmp-model-{here}.{os.getppid()}",  # a live writer's
            tmp_path / f".tmp-model-h000000.{dead.pid}",  # another host's
            tmp_path / f".tmp-model2-{here}.{dead.pid}"]  # another directory's (model2)
    for path in (half, moved_aside, *kept):
        path.mkdir()
    with atomic_dir(tmp_path / "model") as tmp:
        assert tmp.name == f".tmp-model-{here}.{os.getpid()}" and not any(tmp.iterdir())
        (tmp / "a").write_text("1")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["model", moved_aside.name, *(p.name for p in kept)])
    with pytest.raises(RuntimeError), atomic_dir(tmp_path / "model") as tmp:  # model exists now
        (tmp / "b").write_text("half")
        raise RuntimeError("killed mid-write")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["model", *(p.name for p in kept)])
    assert [p.name for p in (tmp_path / "model").iterdir()] == ["a"]
    with atomic_dir(tmp_path / "model") as tmp:
        (tmp / "b").write_text("2")
    assert [p.name for p in (tmp_path / "model").iterdir()] == ["b"]  # replaced whole, nothing merged


def test_atomic_dir_leaves_a_similar_names_only_copy_and_a_symlinks_target(tmp_path):
    import subprocess

    from muppets.config import _HOST_TAG, atomic_dir

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    # the only copy of directory `model-habcdef.v2`, moved aside by a write killed between its renames
    similar = tmp_path / f".old-model-habcdef.v2-h{_HOST_TAG}.{dead.pid}"
    similar.mkdir()
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "theirs").write_text("x")
    (tmp_path / "model").symlink_to(target)
    with atomic_dir(tmp_path / "model") as tmp:
        (tmp / "a").write_text("1")
    assert similar.is_dir() and not (tmp_path / "model").is_symlink()
    assert [p.name for p in target.iterdir()] == ["theirs"]  # the link is replaced, what it pointed at stays
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["model", "elsewhere", similar.name])


def test_replace_dir_puts_the_old_copy_back_when_the_new_one_cannot_go_in(tmp_path, monkeypatch):
    from muppets import config

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "a").write_text("old")
    real_rename = os.rename

    def failing(src, dst):
        if str(src).endswith(config.writer_tag()) and Path(src).name.startswith(".tmp-"):
            raise OSError(28, "No space left on device")
        real_rename(src, dst)

    monkeypatch.setattr(config.os, "rename", failing)
    with pytest.raises(OSError, match="No space"), config.atomic_dir(tmp_path / "model") as tmp:
        (tmp / "a").write_text("new")
    assert [p.name for p in tmp_path.iterdir()] == ["model"] and (tmp_path / "model" / "a").read_text() == "old"


@pytest.mark.parametrize("name, text", [("run.json", '{"opt": {"steps": 3}}'), ("run.yaml", "opt:\n  steps: 3\n")])
def test_a_config_saved_with_a_byte_order_mark_reads_as_without(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())  # what Notepad writes first
    assert load_file(path) == {"opt": {"steps": 3}}


def test_read_utf8_names_the_line_and_the_byte(tmp_path):
    from muppets.config import read_utf8
    from muppets.errors import DataError

    path = tmp_path / "texts.txt"
    path.write_bytes(b"first line\ncaf\xe9 au lait\n")
    with pytest.raises(DataError, match=r"texts\.txt:2 \(byte 14\): texts file is not valid UTF-8 \(value: b'\\xe9'\)"):
        read_utf8(path, "texts file")


@pytest.mark.parametrize("argv, flag", [(["probe", "minilm", "--threads", "-1"], "--threads"),
                                        (["probe", "minilm", "--max-train-sentences", "-1"], "--max-train-sentences"),
                                        (["weak", "label", "lfs.py", "--task", "t.txt", "--jobs", "0"], "--jobs"),
                                        (["data", "prepare", "--input", "x", "--tokenizer", "t", "--out", "o",
                                          "--format", "xml"], "--format")])
def test_bad_numbers_and_choices_are_argparse_errors(argv, flag, capsys):
    from muppets import cli

    with pytest.raises(SystemExit) as caught:
        cli.main(argv)
    assert caught.value.code == 2 and f"argument {flag}:" in capsys.readouterr().err


def test_yaml_merge_keys_still_work_and_may_override_what_they_merge(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text("base: &b {x: 1, y: 2}\nmid: &m {<<: *b, x: 2}\nc: {<<: *m, x: 3}\n")
    assert load_file(path)["c"] == {"x": 3, "y": 2} and load_file(path)["mid"] == {"x": 2, "y": 2}
    path.write_text("train: {[1]: 2}\n")  # an unhashable key: YAML's own error, in one line
    with pytest.raises(ConfigError, match="merge.yaml:1: not valid YAML"):
        load_file(path)


def test_a_post_init_check_in_a_section_names_the_full_key_and_its_line(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("opt:\n  lr: 0.1\ntasks:\n  - name: a\n    weight: -2\n")
    with pytest.raises(ConfigError, match=rf"^{path}:5: tasks\[0\]\.weight: -2\.0 must be >= 0$"):
        load_typed(Many, path, [])


@dataclass
class Recipe:
    train: TrainConfig = field(default_factory=TrainConfig)


def test_a_real_configs_post_init_check_names_the_line_of_its_key(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  lr: 0.1\n  steps: -5\n")
    with pytest.raises(ConfigError, match=rf"^{path}:3: train\.steps: invalid value -5$"):
        load_typed(Recipe, path, [])


def test_an_override_reaches_into_a_list_of_sections():
    """``tasks[1].weight=2`` sets one entry of a list of sections and leaves the others; an index
    past the end, or on a setting that is no list of sections, is refused naming the key."""
    from muppets.multitask.config import MultitaskConfig, TaskEntry

    cfg = MultitaskConfig(tasks=[TaskEntry(name="rte"), TaskEntry(name="mrpc")])
    out = apply_overrides(cfg, ["tasks[1].weight=2", "tasks[0].max_train_examples=16"])
    assert [(t.weight, t.max_train_examples) for t in out.tasks] == [(1.0, 16), (2.0, 0)]
    assert cfg.tasks[1].weight == 1.0  # a copy
    with pytest.raises(ConfigError, match=r"tasks has 2 items"):
        apply_overrides(cfg, ["tasks[2].weight=1"])
    with pytest.raises(ConfigError, match=r"'run_dir' is not a list of sections"):
        apply_overrides(cfg, ["run_dir[0].weight=1"])
    with pytest.raises(ConfigError, match=r"name a setting of tasks\[0\]"):
        apply_overrides(cfg, ["tasks[0]=x"])


def test_final_path_undoes_the_temporary_names_of_atomic_writes(tmp_path):
    from muppets.config import atomic_dir, atomic_path, final_path

    with atomic_dir(tmp_path / "step-00000062") as tmp:
        assert tmp.name != "step-00000062" and final_path(tmp / "w.bin") == tmp_path / "step-00000062" / "w.bin"
    with atomic_path(tmp_path / "log.jsonl") as tmp:
        assert final_path(tmp) == tmp_path / "log.jsonl"
    for plain in (tmp_path / ".tmp-notes", tmp_path / "a.tmp", Path("runs/.hidden.tmp"), Path(".")):
        assert final_path(plain) == plain  # only the writers' own names are undone


def test_a_tokenizer_saved_into_an_atomic_directory_logs_where_it_ends_up(tmp_path, caplog):
    """Fine-tuning and pretraining export into ``.tmp-best-h…`` and rename: the log used to name
    the temporary, gone by the time anyone reads the line."""
    import logging

    from muppets.config import atomic_dir
    from muppets.tokenizers.wordpiece import WordPieceTokenizer

    tok = WordPieceTokenizer.train(["a quiet film about a family", "a dull film"] * 5, vocab_size=80, min_frequency=1)
    with caplog.at_level(logging.INFO, logger="muppets.tokenizers.wordpiece"), atomic_dir(tmp_path / "best") as tmp:
        tok.save(tmp)
    (line,) = [r.getMessage() for r in caplog.records if "saved WordPiece" in r.getMessage()]
    assert line.endswith(f"to {tmp_path / 'best'}") and ".tmp" not in line
