"""``--model org/name`` read from the local Hugging Face cache, as transformers finds it with
``HF_HUB_OFFLINE=1`` (``models--org--name/refs/main`` -> ``snapshots/<commit>/``), never
downloaded; an id that is not cached is one error saying where muppets looked. The cache is a
fake tree built in the test, holding a tiny model saved in the snapshot layout."""

from __future__ import annotations

from pathlib import Path

import pytest
from _tiny_backbones import tiny_bert

from muppets.cli import main
from muppets.errors import ConfigError
from muppets.paths import hub_cache_dir, resolve_model_path
from muppets.transfer.embedders import locate_model
from muppets.transfer.finetune import resolve_model

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _cache(hub: Path, repo: str, refs: dict[str, str] | None = None) -> Path:
    """A hub cache holding ``repo`` at :data:`COMMIT` (``refs``: branch -> commit, default main)."""
    folder = hub / ("models--" + repo.replace("/", "--"))
    snapshot = tiny_bert(folder / "snapshots" / COMMIT)
    for branch, commit in (refs or {"main": COMMIT}).items():
        (folder / "refs" / branch).parent.mkdir(parents=True, exist_ok=True)
        (folder / "refs" / branch).write_text(commit)
    return snapshot


@pytest.fixture
def env(monkeypatch, tmp_path):
    for var in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)  # no relative directory of the id's name lies around
    return monkeypatch


def test_an_id_resolves_to_its_snapshot_as_transformers_finds_it(env, tmp_path):
    transformers = pytest.importorskip("transformers")
    hub = tmp_path / "hub"
    snapshot = _cache(hub, "org/tiny-bert")
    env.setenv("HF_HUB_CACHE", str(hub))
    assert hub_cache_dir() == hub
    assert resolve_model_path("org/tiny-bert") == snapshot
    assert resolve_model("org/tiny-bert") == snapshot and locate_model("org/tiny-bert") == ("bert", snapshot)
    oracle = transformers.utils.cached_file("org/tiny-bert", "config.json", cache_dir=hub, local_files_only=True)
    assert Path(oracle).parent == snapshot  # the same snapshot transformers reads offline


def test_hf_home_a_bare_name_and_a_revision(env, tmp_path):
    home = tmp_path / "home"
    snapshot = _cache(home / "hub", "tiny-bert", refs={"main": "f" * 40, "v1": COMMIT})
    env.setenv("HF_HOME", str(home))
    assert resolve_model_path("tiny-bert@v1") == snapshot  # refs/v1 names the stored commit
    assert resolve_model_path(f"tiny-bert@{COMMIT}") == snapshot  # a commit, directly
    with pytest.raises(ConfigError, match=r"refs/main -> .*snapshots/f{40}/config.json"):
        resolve_model_path("tiny-bert")  # main points at a commit that is not stored
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    env.delenv("HF_HOME")
    assert hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"


def test_commands_take_a_cached_id(env, tmp_path, capsys):
    hub = tmp_path / "hub"
    _cache(hub, "org/tiny-bert")
    env.setenv("HF_HUB_CACHE", str(hub))
    assert main(["attention", "org/tiny-bert", "the river bank", "--out", str(tmp_path / "page.html")]) == 0
    assert (tmp_path / "page.html").is_file()


def test_an_id_not_cached_says_where_it_looked_and_a_directory_wins(env, tmp_path, capsys):
    env.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    expected = tmp_path / "hub" / "models--roberta-base" / "refs" / "main"
    with pytest.raises(ConfigError, match=r"'roberta-base': not a file or directory, and not in the local Hugging "
                                          rf"Face cache \(looked for {expected} \(absent\).*never downloads"):
        resolve_model_path("roberta-base")
    assert main(["attention", "org/missing", "the bank", "--out", str(tmp_path / "p.html")]) == 2
    assert "models--org--missing" in capsys.readouterr().err
    local = tiny_bert(tmp_path / "org" / "tiny-bert")  # a directory of the id's name is taken as it is
    assert resolve_model_path("org/tiny-bert") == Path("org/tiny-bert") and local.is_dir()
