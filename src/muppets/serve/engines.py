"""What the server runs: one engine per model directory, loaded once.

:func:`load_engine` reads the directory and picks the engine; each says which routes it answers:

==================================  ==================  ==========================================
the directory holds                 engine              routes
==================================  ==================  ==========================================
a fine-tuned task model (BERT or    :class:`TaskEngine` ``/predict``
GPT, any kind: ``muppets_task`` or
a ``BertFor…`` architecture)
an HF BERT (``minilm``, a           :class:`Encoder`    ``/v1/embeddings``; ``/fill-mask`` when the
pretraining run, a bare BERT)                           weights have the masked-LM head
an HF GPT-2 / GPT-1 (``gpt-mini``   :class:`LMEngine`   ``/v1/completions`` (+ streaming),
run, a GPT-2 directory)                                 ``/v1/embeddings``
an ELMo / NNLM / word2vec run, a    :class:`WordEngine` ``/v1/embeddings`` (the mean of the top
word-vector file                                        layer's word vectors)
==================================  ==================  ==========================================

An engine turns validated request fields into :class:`~muppets.serve.batcher.Work` items (on the
event loop: tokenizing is fast, and the token counts drive the batcher) and runs a batch of them
(:meth:`Engine.run`, in the batcher's worker thread, under ``torch.inference_mode``).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from muppets.api import config_dict
from muppets.errors import ConfigError
from muppets.runtime import Bf16Linear, bucket_rows, set_precision, to_bf16_linears  # noqa: F401 - their old home
from muppets.serve.batcher import Work
from muppets.serve.config import ServeConfig
from muppets.serve.errors import ApiError
from muppets.sentence import SentenceHead, read_head
from muppets.train.device import move, pick_device

log = logging.getLogger(__name__)

EMBED, FILL, PREDICT, COMPLETE = "/v1/embeddings", "/fill-mask", "/predict", "/v1/completions"
ROUTES = (EMBED, COMPLETE, PREDICT, FILL)


class Engine:
    """A loaded model: the routes it answers and how it runs a batch (see the module docstring)."""

    kind = ""
    routes: tuple[str, ...] = ()
    backend = "torch"  # what runs the forward pass: torch | onnx (:mod:`~muppets.serve.onnx_backend`)
    precision = "float32"  # the linear layers' runtime (``--precision``: :func:`muppets.runtime.set_precision`)
    backend_ms: dict[str, float] | None = None  # --backend auto: each backend's measured forward passes

    def __init__(self, source: Path) -> None:
        self.source = source

    def describe(self) -> dict[str, Any]:
        out = {"kind": self.kind, "source": str(self.source), "routes": list(self.routes), "backend": self.backend,
               "precision": self.precision}
        return out | ({"backend_ms": self.backend_ms} if self.backend_ms else {})

    def run(self, key: Hashable, items: list[Work]) -> list[Any]:
        """Worker thread: one result per item (``key[0]`` names the route)."""
        raise NotImplementedError

    def why_not(self, route: str) -> str:
        """The message of a route this engine does not answer."""
        return (f"{route} is not served for this model: the {self.kind} model at {self.source} "
                f"answers {', '.join(self.routes)}")


def pad_right(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Id rows -> ``ids (B, T)`` padded on the right with ``pad_id`` and ``mask (B, T)`` long."""
    T = max(len(r) for r in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, : len(row)] = torch.as_tensor(list(row), dtype=torch.long)
        mask[b, : len(row)] = 1
    return ids, mask


def fit_length(ids: list[int], limit: int, truncate: bool, index: int, tail: Sequence[int] = ()) -> list[int]:
    """``ids`` cut to ``limit`` (keeping ``tail``, e.g. ``[SEP]``) or a 413 naming the input."""
    if len(ids) <= limit:
        return ids
    if not truncate:
        raise ApiError(413, f"input {index} has {len(ids)} tokens; this model reads at most {limit} "
                            "(send shorter text, or \"truncate\": true to cut it)", param="input",
                       code="context_length_exceeded")
    return [*ids[: limit - len(tail)], *tail]


# ----------------------------------------------------------------------------- sentence encoders


class SentenceEncoder(Engine):
    """Token-level backbone + the directory's :class:`~muppets.sentence.SentenceHead` (pooling,
    dense, normalize) = ``/v1/embeddings``."""

    def __init__(self, source: Path, backbone: torch.nn.Module, head: SentenceHead, positions: int,
                 pad_id: int) -> None:
        super().__init__(source)
        self.backbone, self.head, self.pad_id = backbone.eval(), head.eval(), pad_id
        self.max_tokens = min(positions, head.max_seq_length or positions)
        head.check(int(backbone.cfg.hidden_size), source)
        self.dim = head.dim()

    def token_ids(self, texts: Sequence[str], truncate: bool) -> list[list[int]]:
        """Model input ids per text (specials included), checked against :attr:`max_tokens`."""
        raise NotImplementedError

    def embedding_items(self, texts: Sequence[str], truncate: bool) -> list[Work]:
        return [Work((EMBED,), len(ids), ids) for ids in self.token_ids(texts, truncate)]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` ids and mask -> top layer ``(B, T, H)``."""
        raise NotImplementedError

    def embed_rows(self, rows: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Sentence vectors ``(H,)`` float32 of id rows (one padded forward pass)."""
        ids, mask = self.padded(rows)
        with torch.inference_mode():
            vectors = self.head(self.forward(ids, mask).float(), mask)  # (B, D)
        return list(vectors.cpu().numpy())

    def padded(self, rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`pad_right` ids and mask ``(B, T)``, on the model's device (an ONNX engine has
        no torch backbone: the CPU)."""
        torch_model = isinstance(self.backbone, torch.nn.Module)
        device = next(self.backbone.parameters()).device if torch_model else torch.device("cpu")
        ids, mask = pad_right(rows, self.pad_id)
        return move(ids, device), move(mask, device)

    def run(self, key: Hashable, items: list[Work]) -> list[Any]:
        return self.embed_rows([w.payload for w in items])


class Encoder(SentenceEncoder):
    """An HF encoder directory of any encoder family (BERT, RoBERTa / XLM-R, DistilBERT,
    ELECTRA): embeddings, and fill-mask when its weights have the family's MLM head."""

    kind = "bert"  # replaced by the directory's family name

    def __init__(self, source: Path, cfg: ServeConfig) -> None:
        from muppets import families

        family = families.of_directory(source)
        self.kind = family.name
        self.model = family.load(source).to(pick_device(cfg.device)).eval()
        self.precision = cfg.precision
        set_precision(self.model.backbone, cfg.precision)
        self.tok = family.tokenizer(source)
        self.has_mlm = family.has_mlm(source)
        self.routes = (EMBED, FILL) if self.has_mlm else (EMBED,)
        super().__init__(source, self.model.backbone, read_head(source, cfg.pooling, cfg.normalize),
                         self.model.cfg.max_positions, self.tok.pad_id)

    def why_not(self, route: str) -> str:
        if route == FILL:
            return (f"{route} needs a masked-LM head, and the {self.kind} weights at {self.source} have none: "
                    "serve a pretraining run or checkpoint with its MLM head")
        return super().why_not(route)

    def token_ids(self, texts: Sequence[str], truncate: bool) -> list[list[int]]:
        head, tail = [self.tok.cls_id], [self.tok.sep_id]
        return [fit_length([*head, *ids, *tail], self.max_tokens, truncate, i, tail)
                for i, ids in enumerate(self.tok.encode_batch(texts))]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            top = self.backbone(ids, torch.zeros_like(ids), mask, unpad=True).layers[-1]  # (B, T, H)
        return top.float()  # heads and pooling stay float32

    def run(self, key: Hashable, items: list[Work]) -> list[Any]:
        if key[0] == FILL:
            from muppets.serve.fill_mask import fill_masks

            return fill_masks(self, items)
        return super().run(key, items)


class LMEngine(SentenceEncoder):
    """An HF GPT directory: completions (batched, streamed) and embeddings."""

    kind = "gpt"
    routes = (COMPLETE, EMBED)

    def __init__(self, source: Path, cfg: ServeConfig) -> None:
        from muppets.interop.hf_gpt import load_hf_gpt
        from muppets.tokenizers import ByteLevelBPETokenizer

        self.model = load_hf_gpt(source).to(pick_device(cfg.device)).eval()
        self.tok = ByteLevelBPETokenizer.load(source)
        self.positions = self.model.cfg.max_position_embeddings
        super().__init__(source, self.model.backbone, read_head(source, cfg.pooling, cfg.normalize),
                         self.positions, self.tok.pad_id)

    def token_ids(self, texts: Sequence[str], truncate: bool) -> list[list[int]]:
        return [fit_length(ids or [self.model.cfg.eos_token_id], self.max_tokens, truncate, i)
                for i, ids in enumerate(self.tok.encode_batch(texts))]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.backbone(ids, mask).layers[-1]

    def run(self, key: Hashable, items: list[Work]) -> list[Any]:
        if key[0] == COMPLETE:
            from muppets.serve.generation import complete_batch

            return complete_batch(self, key, items)
        return super().run(key, items)


# ----------------------------------------------------------------------------- word-level models


class WordEngine(Engine):
    """ELMo, NNLM and word vectors: whitespace-split words, the mean of the top layer's vectors
    (of every layer for static vectors, which have one)."""

    routes = (EMBED,)

    def __init__(self, source: str | Path, cfg: ServeConfig) -> None:
        from muppets.transfer.embedders import load_embedder

        if cfg.pooling not in ("", "mean"):  # it would be ignored: say so
            raise ConfigError(f"--pooling {cfg.pooling}: {source} is a word-level model (ELMo, NNLM or word "
                              "vectors), whose sentence vector is the mean of its words' vectors")
        self.embedder = load_embedder(source, "auto")
        super().__init__(self.embedder.source)
        self.kind, self.dim = self.embedder.kind, self.embedder.dim
        self.normalize = bool(cfg.normalize)
        self.max_tokens = self.embedder.max_positions

    def embedding_items(self, texts: Sequence[str], truncate: bool) -> list[Work]:
        items = []
        for i, text in enumerate(texts):
            words = text.split()
            if not words:
                raise ApiError(422, f"input {i} has no words (only whitespace)", param="input")
            items.append(Work((EMBED,), len(words) + 2, words))
        return items

    def run(self, key: Hashable, items: list[Work]) -> list[Any]:
        top = self.embedder.num_layers - 1
        with torch.inference_mode():
            per_word = self.embedder.embed_batch([w.payload for w in items], [top])  # (1, n, D) each
        out = []
        for vectors in per_word:
            v = vectors[0].mean(0).astype(np.float32)  # (D,)
            out.append(v / max(float(np.linalg.norm(v)), 1e-12) if self.normalize else v)
        return out


# ----------------------------------------------------------------------------- loading






def load_engine(cfg: ServeConfig) -> Engine:
    """The engine for ``cfg.model_dir`` (see the module docstring's table) on ``cfg.backend``
    (``onnx`` / ``auto``: :func:`muppets.serve.onnx_backend.load_with_backend`; bf16 runs in
    torch; int8 in torch, or in onnxruntime from an export written with ``--quantize int8``)."""
    if cfg.backend == "torch" or cfg.precision == "bf16" or cfg.device != "cpu":
        return load_torch_engine(cfg)
    from muppets.serve.onnx_backend import load_with_backend

    return load_with_backend(cfg, load_torch_engine)


def load_torch_engine(cfg: ServeConfig) -> Engine:
    """The torch engine for ``cfg.model_dir`` (see the module docstring's table), its linear
    layers in ``cfg.precision`` (:func:`muppets.runtime.set_precision`: encoders and task models;
    language and word models are served in float32 only)."""
    from muppets.transfer.embedders import locate_model

    try:
        kind, path = locate_model(cfg.model_dir)
    except ConfigError:
        from muppets.serve.onnx_backend import find_export

        if cfg.precision == "bf16" and find_export(cfg.model_dir) is not None:
            raise ConfigError(f"--precision bf16 runs the torch model, but {cfg.model_dir!r} holds only an "
                              "ONNX export: serve it without --precision, or serve the model directory "
                              "it was exported from with --precision bf16") from None
        raise
    from muppets import families
    from muppets.interop.hf_tasks import is_task_config

    meta = config_dict(path) if path.is_dir() else {}
    task = is_task_config(meta)
    encoder = families.is_family(kind) and not families.get(kind).causal
    if cfg.precision != "float32" and not (task or encoder):
        raise ConfigError(f"--precision {cfg.precision}: encoders and fine-tuned task models run in it; "
                          f"{cfg.model_dir!r} is a {kind} model (serve it in float32)")
    if cfg.precision == "int8":
        from muppets.runtime import INT8_NOTE

        log.info(INT8_NOTE)
    if task:
        from muppets.serve.tasks import TaskEngine

        return TaskEngine(path, cfg)
    if families.is_family(kind):
        return Encoder(path, cfg) if encoder else LMEngine(path, cfg)
    if kind in ("elmo", "nnlm", "static"):
        return WordEngine(cfg.model_dir, cfg)
    raise ConfigError(f"model {cfg.model_dir!r}: muppets serve has no engine for a {kind} model")
