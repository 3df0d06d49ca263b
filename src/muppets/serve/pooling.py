"""Sentence vectors from token vectors, as the model's sentence-transformers config says.

A sentence-transformers directory (all-MiniLM-L6-v2 among them) lists its modules in
``modules.json``: ``1_Pooling/config.json`` names the pooling (``pooling_mode_mean_tokens`` …)
and a ``…Normalize`` module makes the vectors unit length; ``sentence_bert_config.json`` gives
``max_seq_length``, the longest input the model was trained to read. A directory without them
(a muppets pretraining run, a bare HF BERT or GPT) is pooled by the mean over its tokens,
sentence-transformers' default, and not normalised, unless the server is told otherwise.

Pooling (Reimers & Gurevych 2019, §3), over the real tokens (special tokens included, padding
excluded), of the top layer ``h (B, T, H)`` with mask ``m (B, T)``:

- ``mean``: ``sum_t m_t h_t / sum_t m_t``; ``mean_sqrt_len``: divided by ``sqrt(sum_t m_t)`` instead;
- ``max``: elementwise max over real tokens; ``cls``: the first token; ``last``: the last real one.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from muppets.errors import ConfigError

log = logging.getLogger(__name__)

_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max",
          "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len", "pooling_mode_lasttoken": "last"}


@dataclass(frozen=True)
class SentencePooling:
    """How token vectors become one sentence vector."""

    mode: str = "mean"  # cls | mean | max | mean_sqrt_len | last
    normalize: bool = False  # divide by the L2 norm
    max_seq_length: int | None = None  # longest input in tokens (None = the model's positions)


def read_pooling(directory: str | Path, mode: str = "", normalize: bool | None = None) -> SentencePooling:
    """The pooling a model directory declares; ``mode`` / ``normalize`` override it."""
    directory = Path(directory)
    modules = _json(directory / "modules.json") or []
    declared, norm = "", False
    for module in modules if isinstance(modules, list) else []:
        kind = str(module.get("type", ""))
        if kind.endswith("Pooling"):
            settings = _json(directory / str(module.get("path", "")) / "config.json") or {}
            chosen = [name for key, name in _MODES.items() if settings.get(key)]
            if len(chosen) > 1:
                raise ConfigError(f"{directory}: pooling modes {chosen} are concatenated in this model; "
                                  "muppets serve pools with one mode (give --pooling)")
            declared = chosen[0] if chosen else ""
        norm = norm or kind.endswith("Normalize")
    st = _json(directory / "sentence_bert_config.json") or {}
    max_len = st.get("max_seq_length") if isinstance(st, dict) else None
    pooling = SentencePooling(mode or declared or "mean", norm if normalize is None else normalize,
                              int(max_len) if isinstance(max_len, int) and max_len > 0 else None)
    log.info("sentence pooling: %s", pooling)
    return pooling


def _json(path: Path):
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: not readable JSON: {err}") from err


def pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: SentencePooling) -> torch.Tensor:
    """``hidden (B, T, H)``, ``mask (B, T)`` (1 = real token, right padding) -> ``(B, H)``.

    >>> h = torch.tensor([[[1.0, 0.0], [3.0, 4.0], [9.0, 9.0]]])
    >>> pool(h, torch.tensor([[1, 1, 0]]), SentencePooling("mean")).tolist()
    [[2.0, 2.0]]
    """
    m = mask.to(hidden.dtype)[..., None]  # (B, T, 1)
    count = m.sum(1).clamp_min(1.0)  # (B, 1)
    if pooling.mode == "cls":
        out = hidden[:, 0]
    elif pooling.mode in ("mean", "mean_sqrt_len"):
        total = (hidden * m).sum(1)  # (B, H)
        out = total / (count if pooling.mode == "mean" else count.sqrt())
    elif pooling.mode == "max":
        out = hidden.masked_fill(m == 0, float("-inf")).max(1).values
    elif pooling.mode == "last":
        last = mask.long().sum(1) - 1  # (B,)
        out = hidden[torch.arange(hidden.shape[0]), last.clamp_min(0)]
    else:
        raise ConfigError(f"pooling {pooling.mode!r} is unknown")
    if pooling.normalize:
        out = torch.nn.functional.normalize(out, p=2, dim=-1)
    return out
