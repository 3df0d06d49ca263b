"""Provenance in every model directory muppets writes: ``config.json`` states the muppets version
(``muppets_version``, a key transformers' configs keep and ignore), and ``README.md`` is a model
card whose YAML front matter is the Hugging Face Hub's metadata (``library_name``, ``license``,
``base_model``, ``datasets``, ``pipeline_tag``, ``tags`` and, given metrics, a ``model-index``).

The family save functions (:mod:`muppets.interop.hf_bert`, :mod:`~muppets.interop.hf_gpt`,
:mod:`~muppets.interop.hf_tasks`) call :func:`write_config` and :func:`write_model_card`; callers
that know where a model came from pass a :class:`Provenance`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from muppets import __version__
from muppets.config import write_json_atomic

LICENSE = "apache-2.0"  # the project's licence (pyproject.toml, LICENSE), the card's default
CARD_FILE = "README.md"
VERSION_KEY = "muppets_version"
PIPELINE_TAGS = {"classify": "text-classification", "pair": "text-classification", "regress": "text-classification",
                 "tag": "token-classification", "span": "question-answering", "choice": "multiple-choice",
                 "mlm": "fill-mask", "lm": "text-generation", "encoder": "feature-extraction"}


@dataclass(frozen=True)
class Provenance:
    """Where a written model came from (what the card says beyond its own config.json)."""

    base_model: str = ""  # the model it started from: a hub id, "minilm" or a directory ("" = trained from scratch)
    datasets: tuple[str, ...] = ()  # what it was trained on: task names or corpus files
    task: str = ""  # a muppets task kind, "mlm", "lm" or "encoder" ("" = read from config.json)
    tags: tuple[str, ...] = ()  # more Hub tags (e.g. "onnx")
    license: str = LICENSE  # the weights' licence as the Hub names it


def write_config(directory: str | Path, config: Mapping[str, Any]) -> Path:
    """``directory/config.json``: ``config`` with the muppets version that wrote it."""
    path = Path(directory) / "config.json"
    write_json_atomic(path, {**config, VERSION_KEY: __version__})
    return path


def write_model_card(directory: str | Path, provenance: Provenance | None = None,
                     metrics: Mapping[str, Any] | None = None) -> Path:
    """Write ``directory/README.md`` from its config.json, ``provenance`` and ``metrics`` (a
    ``metrics.json`` dict: ``{"dev": {"accuracy": …}, "test": {…}}``; None = the directory's
    own ``metrics.json`` when it has one)."""
    directory = Path(directory)
    prov = provenance or Provenance()
    config = _read(directory / "config.json")
    metrics = _read(directory / "metrics.json") if metrics is None else dict(metrics)
    task = prov.task or _task_of(config)
    meta = _front_matter(directory, config, prov, task, _scores(metrics))
    body = _body(directory, config, prov, task, meta.get("model-index"))
    path = directory / CARD_FILE
    text = "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n\n" + body
    path.write_text(text, encoding="utf-8")
    return path


def read_model_card(directory: str | Path) -> dict:
    """The YAML front matter of ``directory/README.md`` ({} without one)."""
    path = Path(directory) / CARD_FILE
    if not path.is_file():
        return {}
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        return {}
    return yaml.safe_load(text[4:text.index("\n---\n", 4)]) or {}


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _task_of(config: dict) -> str:
    """The muppets task a config.json states (``muppets_task``), else what its architecture is."""
    task = config.get("muppets_task")
    if isinstance(task, dict) and task.get("kind") in PIPELINE_TAGS:
        return task["kind"]
    archs = " ".join(config.get("architectures") or [])
    if "MaskedLM" in archs or "ForPreTraining" in archs:
        return "mlm"
    return "lm" if "LMHead" in archs or config.get("model_type") in ("gpt2", "openai-gpt") else "encoder"


def _scores(metrics: dict) -> list[dict]:
    """``{"type", "value", "name"}`` for each finite number of each split of ``metrics``."""
    out = []
    for split in ("dev", "test"):
        for key, value in (metrics.get(split) or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                out.append({"type": key, "value": round(float(value), 6), "name": f"{split} {key}"})
    return out


def _front_matter(directory: Path, config: dict, prov: Provenance, task: str, scores: list[dict]) -> dict:
    meta: dict[str, Any] = {"library_name": "muppets", "license": prov.license}
    if prov.base_model:
        meta["base_model"] = prov.base_model
    if prov.datasets:
        meta["datasets"] = list(prov.datasets)
    meta["pipeline_tag"] = PIPELINE_TAGS.get(task, "feature-extraction")
    meta["tags"] = ["muppets", *([config["model_type"]] if config.get("model_type") else []), *prov.tags]
    if scores:
        dataset = prov.datasets[0] if prov.datasets else "unknown"
        meta["model-index"] = [{"name": directory.resolve().parent.name or directory.name, "results": [{
            "task": {"type": meta["pipeline_tag"]}, "dataset": {"name": dataset, "type": dataset},
            "metrics": scores}]}]
    return meta


def _body(directory: Path, config: dict, prov: Provenance, task: str, index: list | None) -> str:
    family = config.get("model_type", "muppets")
    lines = [f"# {directory.resolve().name}", "",
             f"A {family} model ({PIPELINE_TAGS.get(task, 'feature-extraction')}) written by muppets {__version__}"
             + (f", from `{prov.base_model}`" if prov.base_model else ", trained from scratch")
             + (f", on {', '.join(f'`{d}`' for d in prov.datasets)}." if prov.datasets else "."), ""]
    if index:
        lines += ["| metric | value |", "|---|---|"]
        lines += [f"| {m['name']} | {m['value']:.4f} |" for m in index[0]["results"][0]["metrics"]] + [""]
    if (directory / "model.safetensors").is_file():
        own = str(family).startswith("muppets-")  # muppets' own architectures (pre-LN BERT, BiLSTM)
        lines += ["Load it with muppets (`--model DIR`)" + ("; transformers has no class for this architecture."
                                                             if own else " or with transformers' Auto classes."), ""]
    return "\n".join(lines)
