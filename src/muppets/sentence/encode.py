"""Texts -> sentence vectors in process, and ``muppets export sentence-transformers``.

::

    from muppets.sentence.encode import SentenceModel
    vectors = SentenceModel("minilm").encode(["The bank closed.", "A river bank."])   # (2, 384), unit length

:class:`SentenceModel` reads a model directory of any family (:mod:`muppets.families`) with its
:class:`~muppets.sentence.SentenceHead`: inputs are ``[CLS] pieces [SEP]`` for the encoders and
the bare pieces for a left-to-right model (GPT), as ``muppets serve``'s engines frame them, cut
to the head's ``max_seq_length`` as sentence-transformers does. :func:`export_sentence_transformers`
writes a directory ``sentence_transformers.SentenceTransformer(DIR)`` loads with the same vectors.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from muppets.errors import ConfigError
from muppets.interop.model_card import Provenance, write_model_card
from muppets.sentence.head import SETTINGS_FILES, read_head, write_head
from muppets.sentence.modules import read_json, write_json
from muppets.train.device import move, pick_device

log = logging.getLogger(__name__)


def frame_ids(ids: Sequence[int], tok, causal: bool, eos_id: int | None = None) -> list[int]:
    """A text's piece ids as the model reads them: ``[CLS] ids [SEP]`` (encoders), the ids alone
    (a left-to-right model; an empty text reads its end-of-text token)."""
    if causal:
        return list(ids) or [int(eos_id if eos_id is not None else tok.pad_id)]
    return [tok.cls_id, *ids, tok.sep_id]


def backbone_top(backbone: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, causal: bool) -> torch.Tensor:
    """``ids``, ``mask (B, T)`` -> the top layer ``(B, T, H)`` of any family's backbone."""
    if causal:
        return backbone(ids, mask).layers[-1]
    return backbone(ids, torch.zeros_like(ids), mask, unpad=True).layers[-1]


class SentenceModel:
    """A model directory (or ``minilm``) + its sentence head: :meth:`encode` texts to vectors."""

    device = torch.device("cpu")  # where the inputs go (an ONNX subclass runs on the CPU)

    def __init__(self, model: str | Path, pooling: str = "", normalize: bool | None = None,
                 device: str = "cpu", precision: str = "float32") -> None:
        from muppets import families
        from muppets.paths import resolve_model_path
        from muppets.runtime import set_precision

        self.source = resolve_model_path(model)
        self.family = families.of_directory(self.source)
        self.device = pick_device(device)  # cpu | cuda | cuda:N
        self.model = self.family.load(self.source).to(self.device).eval()
        self.precision = precision  # the backbone's linear layers: float32 | bf16 | int8 (muppets.runtime)
        set_precision(self.model.backbone, precision)
        self.tok = self.family.tokenizer(self.source)
        self.head = read_head(self.source, pooling, normalize).to(self.device).eval()
        self.head.check(int(self.model.cfg.hidden_size), self.source)
        positions = int(self.model.cfg.max_position_embeddings)
        self.max_tokens = min(positions, self.head.max_seq_length or positions)
        self.eos_id = getattr(self.model.cfg, "eos_token_id", None)

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        rows = [frame_ids(ids, self.tok, self.family.causal, self.eos_id) for ids in self.tok.encode_batch(list(texts))]
        tail = 0 if self.family.causal else 1  # keep [SEP] when cutting
        return [r if len(r) <= self.max_tokens else r[: self.max_tokens - tail] + r[len(r) - tail:] for r in rows]

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """``(N, D)`` float32 sentence vectors, in the order of ``texts``."""
        from muppets.serve.engines import pad_right  # noqa: PLC0415  (a plain helper)

        rows, out = self.token_ids(texts), []
        with torch.inference_mode():
            for start in range(0, len(rows), batch_size):
                ids, mask = (move(t, self.device) for t in pad_right(rows[start: start + batch_size], self.tok.pad_id))
                out.append(self.head(self.top_layer(ids, mask), mask).cpu().numpy())  # (B, D)
        return np.concatenate(out) if out else np.zeros((0, self.head.dim()), np.float32)

    def top_layer(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``ids``, ``mask (B, T)`` -> the model's top layer ``(B, T, H)`` in float32."""
        return backbone_top(self.model.backbone, ids, mask, self.family.causal).float()


def encode(model: str | Path, texts: Sequence[str], pooling: str = "", normalize: bool | None = None,
           batch_size: int = 32, precision: str = "float32") -> np.ndarray:
    """:meth:`SentenceModel.encode` in one call."""
    return SentenceModel(model, pooling, normalize, precision=precision).encode(texts, batch_size)


# ----------------------------------------------------------------------------- export


_NOT_COPIED = ("README.md", ".gitattributes", *SETTINGS_FILES)


def export_sentence_transformers(model: str | Path, out: str | Path, pooling: str = "",
                                 normalize: bool | None = None) -> Path:
    """Write ``out``: the model's Transformer files (config, weights, tokenizer) and its sentence
    head (as the directory declares, else mean pooling; ``pooling`` / ``normalize`` override),
    so that ``SentenceTransformer(out)`` gives the vectors :class:`SentenceModel` gives."""
    sm = SentenceModel(model, pooling, normalize)  # reads and checks everything before writing
    out = Path(out)
    if out.is_file() or (out.is_dir() and any(out.iterdir())):
        raise ConfigError(f"--out {out}: exists and is not empty; nothing is overwritten (name a new directory)")
    out.mkdir(parents=True, exist_ok=True)
    for item in sm.source.iterdir():
        if item.is_file() and item.name not in _NOT_COPIED:
            shutil.copy2(item, out / item.name)
    if sm.head.max_seq_length is None:
        sm.head.max_seq_length = sm.max_tokens
    write_head(sm.head, out)
    if sm.family.causal:
        _give_pad_token(out)
    write_model_card(out, Provenance(base_model=str(model), task="encoder", tags=("sentence-transformers",)))
    log.info("exported %s as a sentence-transformers directory %s: %s", sm.source, out, sm.head.describe())
    return out


def _give_pad_token(out: Path) -> None:
    """sentence-transformers pads batches: a GPT tokenizer without a pad token gets its
    end-of-text token as one (padding is masked: the vectors do not change)."""
    path = out / "tokenizer_config.json"
    settings = read_json(path, {})
    if settings.get("pad_token"):
        return
    settings["pad_token"] = settings.get("eos_token") or "<|endoftext|>"
    write_json(path, settings)
