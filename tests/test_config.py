"""Typed configs: from_dict, dotted overrides, file loading, error messages."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from muppets.config import apply_overrides, from_dict, load_file, to_dict, write_json_atomic
from muppets.errors import ConfigError


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


def test_write_json_atomic_leaves_no_temporary_files(tmp_path):
    write_json_atomic(tmp_path / "a" / "c.json", {"x": 1})
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["c.json"]
    assert (tmp_path / "a" / "c.json").stat().st_mode & 0o044  # readable by others (umask 022)
