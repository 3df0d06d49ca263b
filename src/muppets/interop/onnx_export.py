"""Encoders and fine-tuned task models -> ONNX, checked against onnxruntime at export time.

:func:`export_onnx` writes a self-describing directory::

    model.onnx            the graph: inputs input_ids, attention_mask, token_type_ids (int64),
                          dynamic batch and sequence axes (and choices, for multiple choice)
    muppets_onnx.json     what the graph is: encoder or task kind, input and output axes, the
                          opset, the check's max |onnx - torch|, a fingerprint of the source weights,
                          ``precision`` (float32, or int8 with ``quantize="int8"``: :func:`quantize_graph`)
                          and for an int8 task model its ``accuracy`` in float32 and int8
    config.json …         the source's settings: HF config (labels, ``muppets_task``), tokenizer
                          files, ``muppets_finetune.json`` (features, span decoding), the
                          sentence-transformers modules (``modules.json``, ``1_Pooling/``, ``2_Dense/`` …)

so :class:`~muppets.interop.onnx_runtime.OnnxPredictor` and ``muppets serve --backend onnx``
run it with no torch weights. A source without tokenizer files is refused before anything is
written (the export could not turn text into ids), unless ``ids_only`` asks for the graph
alone; its manifest then says ``"tokenizer": false`` and the server refuses it by name. What is exported:

==========================================  ===========================================================
the source                                  outputs
==========================================  ===========================================================
an HF BERT directory, ``minilm``, a BERT    ``last_hidden_state (B, T, H)``; with ``layers="all"`` also
pretraining run                             ``hidden_states (L+1, B, T, H)`` (embeddings first), for
                                            scalar mixes. Pooling stays outside the graph (as the
                                            server's ``--pooling`` says)
a fine-tuned task model, BERT or GPT,       ``logits``: ``(B, C)`` classify / pair, ``(B,)`` regress,
any kind                                    ``(B, T, C)`` tag, ``(B, T, 2)`` span, ``(B, C)`` choice
                                            (inputs ``(B, C, T)``); GPT similarity pairs read both
                                            orders: inputs ``(B, 2, T)``
==========================================  ===========================================================

A bare GPT language model is not exported (generation runs a KV-cache loop that one static
graph does not hold): serve it with the torch backend.

**Why the TorchScript exporter** (``torch.onnx.export(..., dynamo=False)``), though torch 2.9+
defaults to the ``torch.export`` one: the backbones skip the attention mask when nothing in a
batch is padded (``padding_mask``: ``if bool(mask.all())``), a data-dependent branch that
``torch.export`` refuses (``GuardOnDataDependentSymNode``) unless the model code is rewritten,
and the dynamo exporter needs two more packages (onnxscript, onnx-ir). Tracing takes the
branch its sample inputs take, so the sample batch always has a padded row: the graph then
always applies the mask, which for an unpadded batch gives the same numbers. Tracing also bakes
in Python-side checks (the length limit), so the graph is checked on a second shape (another
batch size and length) before it is accepted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from muppets.config import atomic_dir, write_json_atomic
from muppets.errors import CheckpointError, ConfigError, MuppetsError
from muppets.interop.model_card import Provenance, write_model_card
from muppets.interop.safetensors_io import read_json_object

log = logging.getLogger(__name__)

MANIFEST = "muppets_onnx.json"  # what the graph is (see the module docstring)
FORMAT = "muppets-onnx/1"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
DEFAULT_OPSET = 17  # LayerNormalization is a single op from 17; onnxruntime >= 1.13 runs it
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx", ".h5", ".msgpack", ".ckpt")
_SKIP_FILES = ("README.md", ".gitattributes")


class ExportError(MuppetsError):
    """The graph could not be written, or onnxruntime's outputs differ from torch's."""


@dataclass
class ExportReport:
    """What :func:`export_onnx` wrote and how well onnxruntime matched torch."""

    directory: str  # the output directory (model.onnx and its settings)
    source: str  # the model directory exported
    what: str  # "encoder" | "task"
    family: str  # "bert" | "gpt"
    kind: str  # task kind ("" for an encoder)
    outputs: list[str]  # graph output names
    opset: int  # ONNX opset of the default domain
    max_abs_diff: float | None  # max |onnxruntime - torch| over the check's inputs (None: not checked)
    tolerance: float  # the largest difference accepted
    seconds: float  # time to export and check
    tokenizer: bool = True  # False: exported with ids_only, the source had no tokenizer files
    precision: str = "float32"  # "int8": the graph's matmuls quantized (quantize="int8"); the check ran on the float32 graph
    int8_max_abs_diff: float | None = None  # int8: max |int8 graph - torch float32| over the check's inputs (no tolerance)
    accuracy: dict[str, Any] | None = None  # a task model's dev score in float32 and int8 (muppets export onnx --quantize int8)


# ----------------------------------------------------------------------------- graphs


class EncoderGraph(nn.Module):
    """An encoder backbone (any encoder family) under the ONNX input names: ``(B, T)`` x 3 -> top layer (and every layer)."""

    def __init__(self, backbone: nn.Module, all_layers: bool = False) -> None:
        super().__init__()
        self.backbone, self.all_layers = backbone, all_layers

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        layers = self.backbone(input_ids, token_type_ids, attention_mask).layers  # L+1 x (B, T, H)
        if self.all_layers:
            return layers[-1], torch.stack(layers)  # (B, T, H), (L+1, B, T, H)
        return layers[-1]


class TaskGraph(nn.Module):
    """A task model under the ONNX input names -> its logits (shapes: :class:`~muppets.heads.TaskOutput`)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, token_type_ids, attention_mask).logits


@dataclass
class _Source:
    """A loaded model to export and what its graph's axes are."""

    path: Path
    graph: nn.Module
    what: str  # encoder | task
    family: str  # bert | gpt
    kind: str  # task kind or ""
    rows: int | None  # the middle input axis: None (inputs (B, T)), 0 (dynamic choices), R (fixed orderings)
    vocab_size: int
    max_positions: int
    outputs: dict[str, list[str | int]]  # name -> axes


def _is_task_dir(meta: dict) -> bool:
    from muppets.interop.hf_tasks import is_task_config

    return is_task_config(meta)


def load_source(model: str | Path, layers: str = "last") -> _Source:
    """The model ``model`` names (a directory, ``minilm``, a run) as a graph to export."""
    from muppets import families
    from muppets.paths import resolve_model_path

    if layers not in ("last", "all"):
        raise ConfigError(f"layers={layers!r}: expected 'last' or 'all'")
    path = resolve_model_path(model)
    config = path / "config.json"
    if not config.is_file() or not any(path.glob("*.safetensors")):
        raise ConfigError(f"model {str(model)!r}: {path} is not an HF model directory with config.json and "
                          "safetensors weights (ONNX export takes BERT encoders and fine-tuned task models)")
    meta = read_json_object(config)
    fam = families.of_directory(path)
    if not fam.onnx:
        raise ConfigError(f"{path}: a {fam.name} model is not exported to ONNX ({fam.description}); "
                          "serve this directory with --backend torch")
    if _is_task_dir(meta):
        return _task_source(path, fam.name, layers)
    if fam.causal:
        raise ConfigError(f"{path}: a left-to-right {fam.name.upper()} language model is not exported to ONNX (generation runs a KV-cache "
                          "loop); export a task model of it, or serve this model with --backend torch")
    backbone = fam.load(path).eval().backbone
    cfg = backbone.cfg
    outputs: dict[str, list[str | int]] = {"last_hidden_state": ["batch", "sequence", cfg.hidden_size]}
    if layers == "all":
        outputs["hidden_states"] = [cfg.num_layers + 1, "batch", "sequence", cfg.hidden_size]
    return _Source(path, EncoderGraph(backbone, layers == "all").eval(), "encoder", fam.name, "", None,
                   cfg.vocab_size, cfg.max_position_embeddings, outputs)


def _task_source(path: Path, fam: str, layers: str) -> _Source:
    from muppets.transfer.models import load_task_model

    if layers != "last":
        raise ConfigError(f"{path}: a task model's graph outputs its logits; layers='all' is for encoders")
    model = load_task_model(path).eval()
    cfg = model.backbone.cfg
    orderings = getattr(getattr(model.head, "vector", None), "orderings", 1)
    rows = 0 if model.kind == "choice" else (orderings if orderings > 1 else None)
    C = int(getattr(getattr(model.head, "classifier", None), "out_features", 0))
    lead: list[str | int] = ["batch"]
    axes = {"classify": lead + [C], "pair": lead + [C], "choice": lead + ["choices"],
            "regress": lead, "tag": lead + ["sequence", C], "span": lead + ["sequence", 2]}
    return _Source(path, TaskGraph(model).eval(), "task", fam, model.kind, rows, cfg.vocab_size,
                   cfg.max_position_embeddings, {"logits": axes[model.kind]})


# ----------------------------------------------------------------------------- sample inputs


def sample_inputs(vocab_size: int, batch: int, length: int, rows: int | None = None,
                  seed: int = 0) -> dict[str, torch.Tensor]:
    """Random ``input_ids``, ``attention_mask``, ``token_type_ids`` ``(B, T)`` (``(B, R, T)`` when
    ``rows``); every row but the first is padded on the right (to a different length each), the
    second half of each row is segment 1."""
    g = torch.Generator().manual_seed(seed)
    n = batch * (rows or 1)
    ids = torch.randint(1, vocab_size, (n, length), generator=g)  # (N, T)
    mask = torch.ones(n, length, dtype=torch.long)
    for r in range(1, n):
        real = max(2, length - 1 - (r * 3) % max(length - 2, 1))
        mask[r, real:] = 0
    ids = ids * mask  # padding id 0 (the traced graph does not depend on it)
    types = torch.zeros_like(ids)
    types[:, length // 2:] = 1
    types = types * mask
    out = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    return {k: v.view(batch, rows, length) if rows else v for k, v in out.items()}


def _samples_for(src: _Source) -> tuple[dict, list[dict]]:
    """The export's tracing sample and the check's inputs (other batch sizes and lengths)."""
    rows = None if src.rows is None else (src.rows or 3)
    longest = min(src.max_positions, 24)
    trace = sample_inputs(src.vocab_size, 2, min(9, longest), rows, seed=0)
    other_rows = None if src.rows is None else (src.rows or 2)  # choices: another count too
    checks = [sample_inputs(src.vocab_size, 3, longest, other_rows, seed=1),
              sample_inputs(src.vocab_size, 1, min(5, longest), rows, seed=2),
              sample_inputs(src.vocab_size, 5, min(13, longest), other_rows, seed=3)]
    checks[1]["attention_mask"].fill_(1)  # one batch with no padding at all
    return trace, checks


# ----------------------------------------------------------------------------- export


def export_onnx(model: str | Path, out: str | Path, opset: int = DEFAULT_OPSET, layers: str = "last",
                check: bool = True, tolerance: float = 1e-4, threads: int = 1,
                ids_only: bool = False, quantize: str = "") -> ExportReport:
    """Export ``model`` to ``out/model.onnx`` with its settings beside it (see the module docstring).

    ``out`` must not exist or be empty (nothing is overwritten). With ``check`` the graph runs in
    onnxruntime on padded inputs of other shapes than the tracing sample's, and an
    :class:`ExportError` is raised (and nothing written at ``out``) when any output differs from
    torch's by more than ``tolerance``. The files are written into a temporary beside ``out``
    that becomes ``out`` when all are there (:func:`~muppets.config.atomic_dir`). A model without tokenizer files is a :class:`ConfigError`
    unless ``ids_only`` (a graph for callers that tokenize themselves).

    ``quantize="int8"`` writes the float32 graph, checks it as above, then replaces it with
    onnxruntime's dynamic quantization of it (:func:`quantize_graph`); the report's
    ``int8_max_abs_diff`` is the int8 graph's largest difference from torch float32 on the same
    inputs (informative: int8 is not meant to match within ``tolerance``).
    """
    if quantize not in ("", "float32", "int8"):
        raise ConfigError(f"--quantize {quantize!r}: the exporter quantizes to int8 only")
    int8 = quantize == "int8"
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise ConfigError(f"--tolerance {tolerance}: must be a finite number >= 0")
    start = time.perf_counter()
    out = Path(out)
    _refuse_existing(out)
    src = load_source(model, layers)
    if not 14 <= opset <= 20:
        raise ConfigError(f"opset {opset}: the exporter writes opsets 14 … 20 (attention needs 14)")
    tokenizer = tokenizer_problem(src.path)
    if tokenizer and not ids_only:
        raise ConfigError(f"{tokenizer}: the export could not turn text into ids, and muppets serve refuses it; "
                          "copy the tokenizer files beside the weights, or pass --ids-only to export the graph "
                          "alone (inputs: token ids)")
    with atomic_dir(out) as tmp:  # out appears whole or not at all, even if the export is killed
        trace, checks = _samples_for(src)
        _write_graph(src, trace, tmp / "model.onnx", opset)
        diff = check_onnx(tmp / "model.onnx", src.graph, checks, tolerance, threads) if check else None
        int8_diff = None
        if int8:
            (tmp / "model.onnx").rename(tmp / "model-float32.onnx")
            quantize_graph(tmp / "model-float32.onnx", tmp / "model.onnx")
            (tmp / "model-float32.onnx").unlink()
            int8_diff = check_onnx(tmp / "model.onnx", src.graph, checks, math.inf, threads) if check else None
        _copy_settings(src.path, tmp)
        write_model_card(tmp, Provenance(base_model=str(model), task="encoder" if src.what == "encoder" else "",
                                         tags=("onnx",)))  # the graph's outputs say what it is, not config.json
        report = ExportReport(str(out), str(src.path), src.what, src.family, src.kind, list(src.outputs), opset,
                              diff, tolerance, round(time.perf_counter() - start, 3), tokenizer=not tokenizer,
                              precision="int8" if int8 else "float32", int8_max_abs_diff=int8_diff)
        write_json_atomic(tmp / MANIFEST, _manifest(src, report))
    log.info("exported %s to %s (max |onnx - torch| %s)", src.path, out / "model.onnx", diff)
    return report


def quantize_graph(source: Path, target: Path) -> None:
    """onnxruntime's dynamic int8 quantization of the graph at ``source``, written to ``target``.

    As torch's int8 (:mod:`muppets.runtime`): only matmuls with a constant weight (the linear
    layers: ``MatMulConstBOnly``; attention's two matmuls and the embeddings stay float32),
    int8 weights with one scale per output column (``per_channel``), activations quantized per
    call. ``reduce_range`` keeps the weights to 7 bits: onnxruntime's u8s8 kernels on AVX2 CPUs
    without VNNI add pairs of 8-bit products in 16 bits, which can saturate at full range
    (onnxruntime's quantization guide); :mod:`muppets.runtime` makes the same choices, and says
    what they were measured against.
    """
    from muppets.interop.onnx_runtime import require_onnxruntime

    require_onnxruntime()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()  # the quantizer logs a line per tensor at INFO on the root logger
    level, quiet = root.level, _DropPreprocessHint()
    root.setLevel(max(level, logging.WARNING))
    root.addFilter(quiet)  # its advice to run shape inference first applies to static quantization
    try:
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True, reduce_range=True,
                         op_types_to_quantize=["MatMul", "Gemm"], extra_options={"MatMulConstBOnly": True})
    except Exception as err:  # noqa: BLE001 - name the model in the message
        raise ExportError(f"{source}: onnxruntime's quantize_dynamic failed: {type(err).__name__}: {err}") from err
    finally:
        root.removeFilter(quiet)
        root.setLevel(level)


class _DropPreprocessHint(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


def tokenizer_problem(path: Path) -> str:
    """Why the tokenizer of model (or export) directory ``path`` does not load ("" when it does)."""
    from muppets.transfer.models import load_tokenizer

    try:
        load_tokenizer(path)
    except MuppetsError as err:
        return str(err)
    return ""


def _refuse_existing(out: Path) -> None:
    if out.is_file() or (out.is_dir() and any(out.iterdir())):
        raise ConfigError(f"--out {out}: exists and is not empty; nothing is overwritten (name a new directory)")


def input_axes(rows: int | None) -> list[str | int]:
    """The input axes: ``[batch, sequence]`` or ``[batch, choices | R, sequence]``."""
    if rows is None:
        return ["batch", "sequence"]
    return ["batch", rows or "choices", "sequence"]


def _dynamic_axes(src: _Source) -> dict[str, dict[int, str]]:
    named = {name: input_axes(src.rows) for name in INPUTS} | src.outputs
    return {name: {i: a for i, a in enumerate(axes) if isinstance(a, str)} for name, axes in named.items()}


def _write_graph(src: _Source, trace: dict, path: Path, opset: int) -> None:
    args = tuple(trace[name] for name in INPUTS)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the exporter's deprecation note and tracer warnings (see the docstring)
        try:
            torch.onnx.export(src.graph, args, str(path), dynamo=False, opset_version=opset,
                              input_names=list(INPUTS), output_names=list(src.outputs),
                              dynamic_axes=_dynamic_axes(src), do_constant_folding=True)
        except Exception as err:  # noqa: BLE001 - name the model in the message
            raise ExportError(f"{src.path}: torch.onnx.export failed: {type(err).__name__}: {err}") from err


def check_onnx(path: Path, graph: nn.Module, inputs: list[dict], tolerance: float = 1e-4,
               threads: int = 1) -> float:
    """Max |onnxruntime - torch| over every output of every input batch; an
    :class:`ExportError` naming the output and shape beyond ``tolerance``."""
    from muppets.interop.onnx_runtime import open_session

    session = open_session(path, threads)
    worst = 0.0
    for batch in inputs:
        feeds = {i.name: batch[i.name].numpy() for i in session.get_inputs()}
        got = session.run(None, feeds)
        with torch.no_grad():
            want = graph(*(batch[name] for name in INPUTS))
        want = want if isinstance(want, tuple) else (want,)
        for out, a, b in zip(session.get_outputs(), got, want):
            b = b.float().numpy()
            if a.shape != b.shape:
                raise ExportError(f"{path}: output {out.name} has shape {a.shape} in onnxruntime, {b.shape} in torch")
            diff = float(np.abs(a - b).max()) if a.size else 0.0
            if not diff <= tolerance:
                raise ExportError(f"{path}: output {out.name} differs from torch by {diff:.3g} > {tolerance:g} "
                                  f"on inputs of shape {tuple(batch['input_ids'].shape)}")
            worst = max(worst, diff)
    return worst


# ----------------------------------------------------------------------------- settings beside the graph


def _copy_settings(source: Path, out: Path) -> None:
    """Every settings file of ``source`` (configs, tokenizer), never its weights, and its sentence
    head (:mod:`muppets.sentence`: pooling, dense with its weights, normalize), which the server
    runs after the graph's top layer; a module muppets cannot run is refused here, by name."""
    from muppets.sentence import read_head, write_head

    for item in source.iterdir():
        if item.is_file() and item.name not in _SKIP_FILES and item.suffix not in _WEIGHT_SUFFIXES:
            shutil.copy2(item, out / item.name)
    if (source / "modules.json").is_file():
        write_head(read_head(source), out)


def weights_fingerprint(directory: str | Path) -> str:
    """sha256 over the directory's ``*.safetensors`` files (names and bytes): tells a stale export."""
    h = hashlib.sha256()
    for file in sorted(Path(directory).glob("*.safetensors")):
        h.update(file.name.encode())
        with file.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _manifest(src: _Source, report: ExportReport) -> dict[str, Any]:
    try:
        import onnx

        onnx_version = onnx.__version__
    except ImportError:
        onnx_version = None
    written = {k: v for k, v in asdict(report).items() if k != "directory"}  # the directory may move
    return {"format": FORMAT, **written, "inputs": {name: input_axes(src.rows) for name in INPUTS},
            "output_axes": src.outputs, "vocab_size": src.vocab_size, "max_positions": src.max_positions,
            "source_fingerprint": weights_fingerprint(src.path), "torch": torch.__version__,
            "onnx": onnx_version, "exporter": "torch.onnx.export(dynamo=False)"}


def is_export(directory: str | Path) -> bool:
    """Whether ``directory`` holds an export (``model.onnx`` and its :data:`MANIFEST`)."""
    return (Path(directory) / MANIFEST).is_file() and (Path(directory) / "model.onnx").is_file()


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The :data:`MANIFEST` of an export directory (a :class:`ConfigError` when absent or foreign)."""
    path = Path(directory) / MANIFEST
    if not is_export(directory):
        raise ConfigError(f"{directory}: no muppets ONNX export here (model.onnx and {MANIFEST}); "
                          "write one with: muppets export onnx --model MODEL --out DIR")
    data = read_json_object(path)
    if data.get("format") != FORMAT:
        raise ConfigError(f"{path}: format {data.get('format')!r}, expected {FORMAT!r}")
    return data
