"""The feature cache's key: any change that can change the vectors misses the cache (issue 15
item 9): the stored dtype, the embedding code's version; an unchanged setting still hits it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from muppets.transfer import feature_cache
from muppets.transfer.feature_cache import EMBEDDING_CODE, FeatureSource, code_version

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny_backbones import tiny_vectors  # noqa: E402

SENTENCES = [["the", "movie", "was", "good"], ["a", "bad", "film"]]


@pytest.fixture()
def vectors(tmp_path: Path) -> Path:
    return tiny_vectors(tmp_path / "vectors.txt")


@pytest.fixture()
def loads(monkeypatch) -> list[str]:
    """The model paths loaded (a cache hit loads nothing)."""
    seen: list[str] = []
    real = feature_cache.load_embedder

    def counting(path, *args, **kwargs):
        seen.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(feature_cache, "load_embedder", counting)
    return seen


def _features(vectors: Path, cache: Path, dtype: str) -> tuple[Path, list[np.ndarray]]:
    source = FeatureSource(str(vectors), "0", cache_dir=cache, dtype=dtype)
    return source.cache_path(SENTENCES, "toy-train"), source.features(SENTENCES, "toy-train")[0]


def test_float16_and_float32_runs_do_not_share_a_cache_entry(vectors, tmp_path, loads):
    half_path, half = _features(vectors, tmp_path / "cache", "float16")
    full_path, full = _features(vectors, tmp_path / "cache", "float32")
    assert half_path != full_path and len(loads) == 2
    assert half[0].dtype == np.float16 and full[0].dtype == np.float32
    again_path, again = _features(vectors, tmp_path / "cache", "float16")  # an unchanged run still hits
    assert again_path == half_path and len(loads) == 2 and np.array_equal(again[1], half[1])


def test_a_changed_code_version_misses_the_cache(vectors, tmp_path, loads, monkeypatch):
    monkeypatch.setattr(feature_cache, "code_version", lambda: "before")
    before, _ = _features(vectors, tmp_path / "cache", "float16")
    monkeypatch.setattr(feature_cache, "code_version", lambda: "after")
    after, _ = _features(vectors, tmp_path / "cache", "float16")
    assert before != after and len(loads) == 2 and before.is_file() and after.is_file()


def test_code_version_follows_every_listed_source_file(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "a.py").write_text("A = 1\n")
    (tmp_path / "pkg" / "b.py").write_text("B = 1\n")
    (tmp_path / "other.py").write_text("C = 1\n")
    version = lambda: code_version(("a.py", "pkg"), root=tmp_path)  # noqa: E731
    first = version()
    (tmp_path / "other.py").write_text("C = 2\n")  # not embedding code
    assert version() == first
    (tmp_path / "pkg" / "b.py").write_text("B = 2\n")
    second = version()
    (tmp_path / "pkg" / "new.py").write_text("D = 1\n")  # a new file in a listed folder counts too
    third = version()
    (tmp_path / "a.py").unlink()
    assert len({first, second, third, version()}) == 4


def test_the_listed_embedding_code_exists():
    """A renamed module would silently drop out of the version: the list must name real files."""
    root = Path(feature_cache.__file__).resolve().parents[1]
    assert all((root / name).exists() for name in EMBEDDING_CODE)
    assert {"transfer/embedders.py", "transfer/feature_cache.py", "models", "nn"} <= set(EMBEDDING_CODE)
    assert code_version() == code_version()
