"""A task model's score in several runtimes (torch float32 / bf16 / int8, ONNX), on its task's split.

What reports the accuracy change of a precision: ``muppets evaluate --precision int8`` (torch
float32 against torch int8), ``muppets export onnx --quantize int8`` (torch float32 against the
int8 graph) and ``benchmarks/int8_speed.py``. Each runtime is a
:class:`~muppets.transfer.predict.Predictor` (or :class:`~muppets.interop.onnx_runtime.OnnxPredictor`),
so the scores come from the code path that serves predictions; they are scored with the task's
metric (:func:`~muppets.transfer.finetune.score`) as ``muppets evaluate`` scores them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from muppets.errors import ConfigError
from muppets.interop.safetensors_io import read_json_object


def model_task(model_dir: str | Path) -> Any:
    """The :class:`~muppets.transfer.finetune.TaskSection` a fine-tuned directory was trained on
    (its ``muppets_finetune.json``), or None when it does not name one."""
    from muppets.transfer.finetune import TaskSection
    from muppets.transfer.predict import SETTINGS_FILE

    path = Path(model_dir) / SETTINGS_FILE
    if not path.is_file():
        return None
    settings = read_json_object(path)
    saved = (settings.get("finetune") or {}).get("task") or {}
    known = {f.name for f in fields(TaskSection)}
    section = TaskSection(**{k: v for k, v in saved.items() if k in known})
    if not section.name and settings.get("task"):
        section.name = str(settings["task"])
    return section if section.name or section.files else None


def task_examples(task: Any, split: str = "dev", max_examples: int = 0) -> tuple[Any, list[Any], int]:
    """``(spec, examples, total)``: the first ``max_examples`` (0 = all) of the task's split."""
    from muppets.transfer.finetune import load_task_data

    data = load_task_data(task)
    examples = list(data[split])  # a clear error for a split the task has not
    return data.spec, examples[:max_examples] if max_examples > 0 else examples, len(examples)


def score_predictor(predictor: Any, spec: Any, examples: Sequence[Any]) -> dict[str, float]:
    """The task's metrics of ``predictor``'s predictions on labelled ``examples`` (the
    predictor's features and span settings, the task's labels)."""
    from muppets.transfer.features import make_features
    from muppets.transfer.finetune import score
    from muppets.transfer.predict import decode, feature_logits

    if list(predictor.labels) and list(spec.labels) and list(predictor.labels) != list(spec.labels):
        raise ConfigError(f"{predictor.model_dir} has labels {predictor.labels}; task {spec.name!r} has {spec.labels}")
    feats = make_features(spec.kind, examples, predictor.tokenizer, predictor.features, spec.labels)
    logits = feature_logits(predictor.model, feats, predictor.batch_size, predictor.tokenizer.pad_id)
    return score(spec, examples, decode(spec.kind, examples, feats, logits, spec.labels, predictor.span))


def compare(scores: Mapping[str, Mapping[str, float]], reference: str = "float32") -> dict[str, Any]:
    """``{"scores": {runtime: metrics}, "change": {runtime: {metric: its - reference's}}}``; the
    change is in the metric's own units (accuracy 0.9232 - 0.9266 = -0.0034, i.e. -0.34 points)."""
    base = scores[reference]
    change = {name: {k: round(v - base[k], 6) for k, v in metrics.items() if k in base}
              for name, metrics in scores.items() if name != reference}
    return {"reference": reference, "scores": {k: dict(v) for k, v in scores.items()}, "change": change}


def compare_lines(result: Mapping[str, Any], where: str) -> list[str]:
    """Printable lines of :func:`compare`'s result: each runtime's metrics, then the change."""
    lines = [f"scores on {where}:"]
    for name, metrics in result["scores"].items():
        lines.append(f"  {name:<14} " + "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
    for name, delta in result["change"].items():
        lines.append(f"  {name} - {result['reference']}: " + "  ".join(f"{k} {v:+.4f}" for k, v in delta.items()))
    return lines
