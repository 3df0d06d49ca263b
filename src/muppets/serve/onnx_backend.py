"""``muppets serve MODEL --backend torch|onnx|auto``: the model's forward pass in onnxruntime.

The ONNX engines are the torch ones with the forward pass swapped, so tokenizing, batching,
pooling and decoding are one code path and the outputs contract holds (embeddings cosine
>= 0.9999, the same labels, ``tests/test_onnx_export.py``):

- :class:`OnnxEncoder`: ``/v1/embeddings`` of an encoder export (pooling as the copied
  sentence-transformers files say); ``/fill-mask`` is not served (the graph has no MLM head);
- :class:`OnnxTaskEngine`: ``/predict`` of a task export, through
  :class:`~muppets.interop.onnx_runtime.OnnxPredictor`.

**Where the export is found**: ``MODEL`` is the export directory itself (``muppets export onnx
X --out DIR``, then ``muppets serve DIR``: no torch weights needed), or a model directory with
the export in its ``onnx/`` folder (``--out X/onnx``).

**Which backend** (``--backend``, default ``auto``):

- ``torch``: the torch engine, whatever exports exist;
- ``onnx``: the export (an error when there is none or onnxruntime is missing);
- ``auto``: onnx when only the export can be loaded; torch when there is no export, no
  onnxruntime, the export's precision is not ``--precision`` (an int8 export beside a model
  served in float32, or the reverse), the export is stale (its fingerprint of the source
  weights differs), or it would drop a route the torch engine answers (``/fill-mask``); otherwise **both are measured at
  startup** on the same random padded batches (batch 1 and a full batch, as the server will run
  them, with the configured threads), and the faster is kept. Measured, not assumed: which
  runtime wins depends on the model size, the batch shapes and the CPU; the timings are logged
  and shown on ``/health`` (``backend_ms``).

onnxruntime runs ``--threads`` intra-op threads (0 = one per core), as torch does.

**Precision**: an export is float32, or int8 when written with ``muppets export onnx --quantize
int8`` (its manifest says which). An export directory served alone runs at its own precision
(``/health`` shows it); ``--precision int8`` with a float32 export, or with ``--backend onnx``
and a float32 export, is refused by name; ``--precision int8 --backend auto`` measures torch
int8 against an int8 export.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from muppets.errors import ConfigError, MuppetsError
from muppets.interop.onnx_export import is_export, read_manifest, sample_inputs, tokenizer_problem, weights_fingerprint
from muppets.interop.onnx_runtime import OnnxModel, OnnxPredictor, require_onnxruntime
from muppets.serve.config import ServeConfig
from muppets.serve.engines import EMBED, FILL, Encoder, Engine, SentenceEncoder
from muppets.sentence import read_head
from muppets.serve.tasks import TaskEngine

log = logging.getLogger(__name__)


class OnnxEncoder(Encoder):
    """An encoder export: ``/v1/embeddings`` with onnxruntime's top layer."""

    backend = "onnx"
    routes = (EMBED,)

    def __init__(self, export: Path, cfg: ServeConfig) -> None:
        from muppets import families

        Engine.__init__(self, export)  # not Encoder's: it loads torch weights
        self.onnx = OnnxModel(export, cfg.threads)
        manifest = self.onnx.manifest
        if manifest.get("what") != "encoder":
            raise ConfigError(f"{export}: a {manifest.get('kind')} task model export; it answers /predict")
        self.tok, self.has_mlm, self.backbone = families.of_directory(export).tokenizer(export), False, None
        self.head = read_head(export, cfg.pooling, cfg.normalize).eval()
        self.pad_id = self.tok.pad_id
        positions = int(manifest["max_positions"])
        self.max_tokens = min(positions, self.head.max_seq_length or positions)
        self.head.check(int(manifest["output_axes"]["last_hidden_state"][-1]), export)
        self.dim = self.head.dim()
        self.precision = export_precision(manifest)

    def why_not(self, route: str) -> str:
        if route == FILL:
            return (f"{route} is not served by the ONNX export at {self.source} (the graph has no masked-LM "
                    "head): serve the torch model with --backend torch")
        return super().why_not(route)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(self.onnx.run(ids, mask, torch.zeros_like(ids))["last_hidden_state"])


class OnnxTaskEngine(TaskEngine):
    """A task export: ``/predict`` through :class:`~muppets.interop.onnx_runtime.OnnxPredictor`."""

    backend = "onnx"

    def __init__(self, export: Path, cfg: ServeConfig) -> None:
        Engine.__init__(self, export)  # not TaskEngine's: it loads torch weights
        self.predictor = OnnxPredictor(export, batch_size=cfg.max_batch_size, threads=cfg.threads)
        self.precision = self.predictor.precision
        self.kind = self.predictor.kind
        self.max_len = self.predictor.features.max_seq_len


def load_onnx_engine(export: Path, cfg: ServeConfig) -> Engine:
    """The ONNX engine of an export directory."""
    require_onnxruntime()
    manifest = read_manifest(export)
    if manifest.get("tokenizer") is False and (problem := tokenizer_problem(export)):
        raise ConfigError(f"{export}: exported with --ids-only from {manifest.get('source')}, which had no tokenizer "
                          f"({problem}); the server turns text into ids: copy the model's tokenizer files into "
                          "the export")
    precision = export_precision(manifest)
    if cfg.precision != "float32" and cfg.precision != precision:
        raise ConfigError(f"--precision {cfg.precision}: the ONNX export at {export} is {precision}; export it with "
                          f"--quantize {cfg.precision}, or serve the torch model with --backend torch")
    if precision == "int8":
        log.info("ONNX export at %s: int8 (onnxruntime's dynamic quantization of its matmuls)", export)
    if manifest.get("what") == "task":
        return OnnxTaskEngine(export, cfg)
    return OnnxEncoder(export, cfg)


def export_precision(manifest: dict) -> str:
    """``float32`` or ``int8`` (an export written with ``--quantize int8``)."""
    return str(manifest.get("precision", "float32"))


def find_export(model_dir: str) -> Path | None:
    """The export ``model_dir`` names: itself, or its (or its run's ``final/``) ``onnx/`` folder."""
    from muppets.paths import resolve_data_path, resolve_model_path

    given = resolve_model_path(model_dir) if model_dir == "minilm" else resolve_data_path(model_dir)
    resolved = resolve_model_path(model_dir)
    for candidate in (given, given / "onnx", resolved, resolved / "onnx"):
        if is_export(candidate):
            return candidate
    return None


def load_with_backend(cfg: ServeConfig, load_torch: Callable[[ServeConfig], Engine]) -> Engine:
    """The engine ``cfg.backend`` (``onnx`` or ``auto``) picks (see the module docstring)."""
    export = find_export(cfg.model_dir)
    if cfg.backend == "onnx":
        if export is None:
            raise ConfigError(f"--backend onnx: no ONNX export at {cfg.model_dir} or in its onnx/ folder "
                              f"(write one: muppets export onnx --model {cfg.model_dir} --out DIR)")
        return load_onnx_engine(export, cfg)
    if export is None:
        return load_torch(cfg)
    try:
        require_onnxruntime()
    except ConfigError as err:
        log.warning("auto backend: torch, though %s has an ONNX export (%s)", cfg.model_dir, err)
        return load_torch(cfg)
    try:
        torch_engine = load_torch(cfg)
    except MuppetsError as err:  # an export directory alone: no torch weights
        log.info("auto backend: onnx (no torch model at %s: %s)", cfg.model_dir, err)
        return load_onnx_engine(export, cfg)
    reason = _keep_torch_because(export, torch_engine)
    if reason:
        log.warning("auto backend: torch, not the ONNX export at %s: %s", export, reason)
        return torch_engine
    return faster(torch_engine, load_onnx_engine(export, cfg), cfg)


def _keep_torch_because(export: Path, torch_engine: Engine) -> str:
    """Why the export must not replace the torch engine ("" when it may)."""
    manifest = read_manifest(export)
    expected = "task" if isinstance(torch_engine, TaskEngine) else "encoder"
    if manifest.get("what") != expected or not isinstance(torch_engine, (TaskEngine, Encoder)):
        return f"it holds a {manifest.get('what')}, the directory a {torch_engine.kind} model"
    if manifest.get("tokenizer") is False and tokenizer_problem(export):
        return "it was exported with --ids-only and has no tokenizer"
    if export_precision(manifest) != torch_engine.precision:
        return (f"it is {export_precision(manifest)}, the torch model runs in {torch_engine.precision} "
                f"(--precision {export_precision(manifest)} compares the two)")
    if manifest.get("source_fingerprint") != weights_fingerprint(torch_engine.source):
        return f"it is stale (exported from other weights than those in {torch_engine.source})"
    if isinstance(torch_engine, Encoder) and torch_engine.has_mlm:
        return "the torch model also answers /fill-mask, which the export cannot"
    return ""


# ----------------------------------------------------------------------------- measuring at startup


def _forward_of(engine: Engine) -> Callable[[dict], object]:
    """The engine's bare forward pass on a batch of ids (what the backends differ in)."""
    if isinstance(engine, SentenceEncoder):
        return lambda b: engine.forward(b["input_ids"], b["attention_mask"])
    model = engine.predictor.model
    return lambda b: model(b["input_ids"], b["token_type_ids"], b["attention_mask"])


def _probe_batches(onnx_engine: Engine, cfg: ServeConfig) -> list[dict]:
    """Batch 1 and a full batch (up to 16 rows of 64 tokens, within the token budget)."""
    manifest = onnx_engine.onnx.manifest if isinstance(onnx_engine, OnnxEncoder) else onnx_engine.predictor.model.onnx.manifest
    axes = manifest["inputs"]["input_ids"]
    rows = None if len(axes) == 2 else (axes[1] if isinstance(axes[1], int) else 2)
    T = min(64, int(manifest["max_positions"]))
    full = max(1, min(16, cfg.max_batch_size, cfg.max_batch_tokens // (T * (rows or 1))))
    vocab = int(manifest["vocab_size"])
    return [sample_inputs(vocab, 1, min(16, T), rows, seed=5), sample_inputs(vocab, full, T, rows, seed=6)]


def _milliseconds(call: Callable[[dict], object], batches: list[dict], repeats: int = 3) -> float:
    """Sum over the batches of the median of ``repeats`` timed calls (after one warm-up)."""
    total = 0.0
    with torch.inference_mode():
        for batch in batches:
            call(batch)
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                call(batch)
                times.append(time.perf_counter() - start)
            total += float(np.median(times))
    return 1000.0 * total


def faster(torch_engine: Engine, onnx_engine: Engine, cfg: ServeConfig) -> Engine:
    """Time both engines' forward passes on the same batches; keep the faster."""
    batches = _probe_batches(onnx_engine, cfg)
    timings = {"torch": round(_milliseconds(_forward_of(torch_engine), batches), 3),
               "onnx": round(_milliseconds(_forward_of(onnx_engine), batches), 3)}
    chosen = onnx_engine if timings["onnx"] < timings["torch"] else torch_engine
    chosen.backend_ms = timings
    log.info("auto backend: %s (forward passes on batch 1 and %d: torch %.1f ms, onnx %.1f ms)",
             chosen.backend, batches[-1]["input_ids"].shape[0], timings["torch"], timings["onnx"])
    return chosen
