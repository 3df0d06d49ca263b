"""Running an ONNX export (:mod:`~muppets.interop.onnx_export`) with onnxruntime.

- :func:`open_session`: an ``InferenceSession`` on the CPU with a given number of threads;
- :class:`OnnxModel`: an export directory's graph and manifest, called with torch or numpy ids;
- :class:`OnnxTaskModel`: a task graph under :class:`~muppets.heads.TaskModel`'s call
  (``model(input_ids, token_type_ids, attention_mask).logits``), so
  :func:`~muppets.transfer.predict.feature_logits` and :func:`~muppets.transfer.predict.decode`
  run it unchanged;
- :class:`OnnxPredictor`: :class:`~muppets.transfer.predict.Predictor` on an export directory
  (features, labels and span settings read from the files copied beside the graph);
- :class:`OnnxSentenceModel`: :class:`~muppets.sentence.encode.SentenceModel` on an encoder
  export (``encode`` texts to sentence vectors);
- :func:`load_export`: the one of the two an export directory is for (``muppets.load(DIR)``).

Usage::

    predictor = OnnxPredictor("runs/sst2/best-onnx")
    predictor.predict(["a gripping film", "dull"])            # the torch Predictor's answers
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from muppets.errors import ConfigError
from muppets.heads import TaskOutput
from muppets.interop.hf_tasks import saved_label_names
from muppets.interop.onnx_export import INPUTS, read_manifest
from muppets.interop.safetensors_io import read_json_object
from muppets.sentence import read_head
from muppets.sentence.encode import SentenceModel
from muppets.transfer.predict import Predictor, load_settings


def require_onnxruntime() -> Any:
    """The ``onnxruntime`` module, or a :class:`ConfigError` saying how to install it."""
    try:
        import onnxruntime
    except ImportError:
        raise ConfigError("ONNX needs onnxruntime: pip install -e \".[onnx]\"") from None
    return onnxruntime


def open_session(path: str | Path, threads: int = 0) -> Any:
    """A CPU ``InferenceSession`` of ``path``: ``threads`` intra-op threads (0 = onnxruntime's
    default, one per core), one inter-op thread, every graph optimisation."""
    ort = require_onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = max(int(threads), 0)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


class OnnxModel:
    """An export directory: ``run(input_ids, attention_mask, token_type_ids)`` -> ``{output: array}``."""

    def __init__(self, directory: str | Path, threads: int = 0) -> None:
        self.directory = Path(directory)
        self.manifest = read_manifest(self.directory)
        self.session = open_session(self.directory / "model.onnx", threads)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        unknown = set(self.input_names) - set(INPUTS)
        if unknown:
            raise ConfigError(f"{self.directory}/model.onnx: unexpected inputs {sorted(unknown)}")

    @property
    def kind(self) -> str:
        """The task kind, or ``""`` for an encoder."""
        return str(self.manifest.get("kind", ""))

    def run(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> dict[str, np.ndarray]:
        """Outputs for ids ``(B, T)`` (``(B, C, T)`` for choice); torch tensors or arrays."""
        given = {"input_ids": input_ids, "attention_mask": attention_mask,
                 "token_type_ids": torch.zeros_like(torch.as_tensor(input_ids)) if token_type_ids is None else token_type_ids}
        feeds = {name: _int64(given[name]) for name in self.input_names}  # an unused input is not in the graph
        return dict(zip(self.output_names, self.session.run(None, feeds)))


def _int64(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.ascontiguousarray(x, dtype=np.int64)


class OnnxTaskModel(nn.Module):
    """A task graph called like a :class:`~muppets.heads.TaskModel` (inference only)."""

    def __init__(self, onnx_model: OnnxModel) -> None:
        super().__init__()
        if onnx_model.manifest.get("what") != "task":
            raise ConfigError(f"{onnx_model.directory}: an encoder export, not a task model")
        self.onnx, self.kind = onnx_model, onnx_model.kind
        # feature_logits reads the device from the first parameter: an empty one says "cpu"
        self.device_anchor = nn.Parameter(torch.empty(0), requires_grad=False)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, labels: torch.Tensor | None = None) -> TaskOutput:
        if labels is not None:
            raise ConfigError("an ONNX task model predicts only (no labels, no loss)")
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        logits = self.onnx.run(input_ids, mask, token_type_ids)["logits"]
        return TaskOutput(logits=torch.from_numpy(logits))


class OnnxPredictor(Predictor):
    """:class:`~muppets.transfer.predict.Predictor` on an export directory (no torch weights).

    Args:
        directory: written by :func:`~muppets.interop.onnx_export.export_onnx` from a task model.
        batch_size: inputs per forward pass.
        threads: onnxruntime intra-op threads (0 = one per core).
    """

    def __init__(self, directory: str | Path, batch_size: int = 64, threads: int = 0) -> None:
        from muppets.transfer.features import FeatureOptions
        from muppets.transfer.models import load_tokenizer

        self.model_dir = Path(directory)
        self.model = OnnxTaskModel(OnnxModel(self.model_dir, threads)).eval()
        self.tokenizer = load_tokenizer(self.model_dir)
        self.kind = self.model.kind
        self.labels, self.names = _labels(self.model_dir, self.kind, self.model.onnx.manifest)
        saved_features, self.span = load_settings(self.model_dir)
        limit = int(self.model.onnx.manifest["max_positions"])
        self.features = saved_features or FeatureOptions(max_seq_len=min(128, limit))
        self.batch_size = batch_size
        self.precision = str(self.model.onnx.manifest.get("precision", "float32"))  # int8: --quantize int8


class OnnxSentenceModel(SentenceModel):
    """:class:`~muppets.sentence.encode.SentenceModel` on an encoder export (no torch weights):
    the graph's top layer, then the sentence head copied beside it, as the server's
    ``/v1/embeddings`` runs it (:class:`~muppets.serve.onnx_backend.OnnxEncoder`)."""

    def __init__(self, directory: str | Path, pooling: str = "", normalize: bool | None = None,
                 threads: int = 0) -> None:
        from muppets import families

        self.source = Path(directory)
        self.onnx = OnnxModel(self.source, threads)
        if self.onnx.manifest.get("what") != "encoder":
            raise ConfigError(f"{self.source}: a {self.onnx.kind} task model export, not an encoder (load it as "
                              "an OnnxPredictor)")
        self.family = families.of_directory(self.source)
        self.model, self.tok, self.eos_id = None, self.family.tokenizer(self.source), None
        self.head = read_head(self.source, pooling, normalize).eval()
        self.head.check(int(self.onnx.manifest["output_axes"]["last_hidden_state"][-1]), self.source)
        self.precision = str(self.onnx.manifest.get("precision", "float32"))  # int8: --quantize int8
        positions = int(self.onnx.manifest["max_positions"])
        self.max_tokens = min(positions, self.head.max_seq_length or positions)

    def top_layer(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(self.onnx.run(ids, mask, torch.zeros_like(ids))["last_hidden_state"]).float()


def load_export(directory: str | Path, threads: int = 0) -> OnnxPredictor | OnnxSentenceModel:
    """The object an export directory is for, as the server runs it: a task model's
    :class:`OnnxPredictor` (``/predict``), an encoder's :class:`OnnxSentenceModel` (``/v1/embeddings``)."""
    if read_manifest(directory).get("what") == "task":
        return OnnxPredictor(directory, threads=threads)
    return OnnxSentenceModel(directory, threads=threads)


def _labels(directory: Path, kind: str, manifest: dict) -> tuple[list[str], list[str]]:
    """As :func:`~muppets.transfer.predict.model_labels`: ``(labels, names)`` of the config.json."""
    n = int(manifest["output_axes"]["logits"][-1]) if kind in ("classify", "pair", "tag") else 0  # a fixed axis
    return saved_label_names(read_json_object(directory / "config.json"), kind, n)
