"""``/fill-mask``: the masked-LM head's most likely tokens at each ``[MASK]`` of the input.

Each input is read as BERT reads it (``[CLS] text [SEP]``, the tokenizer's mask token written in
the text as itself, e.g. ``[MASK]``); the answer gives, for every mask in order, the ``top_k``
tokens by probability (softmax over the vocabulary), each with the input decoded with that
token in that mask's place (the other masks left as they are), as transformers' fill-mask
pipeline does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from muppets.serve.batcher import Work
from muppets.serve.engines import FILL, Encoder
from muppets.serve.errors import ApiError


@dataclass(frozen=True)
class MaskedInput:
    ids: list[int]  # [CLS] … [SEP]
    top_k: int  # candidates per mask


def fill_items(engine: Encoder, texts: Sequence[str], top_k: int, truncate: bool) -> list[Work]:
    """Work items for ``texts`` (each must hold at least one mask token: 422 otherwise)."""
    mask_id, items = engine.tok.mask_id, []
    for i, ids in enumerate(engine.token_ids(texts, truncate)):
        if mask_id not in ids:
            token = engine.tok.id_to_token(mask_id)
            raise ApiError(422, f"input {i} has no {token} token to fill", param="inputs")
        items.append(Work((FILL,), len(ids), MaskedInput(ids, top_k)))
    return items


def fill_masks(engine: Encoder, items: list[Work]) -> list[Any]:
    """Worker thread: per input, per mask, the top-k candidates."""
    rows = [w.payload.ids for w in items]
    ids, mask = engine.padded(rows)
    k = min(max(w.payload.top_k for w in items), engine.model.cfg.vocab_size)
    with torch.inference_mode():
        hidden = engine.forward(ids, mask)  # (B, T, H)
        where = ids == engine.tok.mask_id  # (B, T)
        probs = engine.model.mlm(hidden[where]).float().softmax(-1)  # (M, V): masks in row-major order
        scores, tokens = (t.cpu() for t in probs.topk(k, dim=-1))  # (M, k), read on the host
    out, m = [], 0
    for w in items:
        positions = [t for t, i in enumerate(w.payload.ids) if i == engine.tok.mask_id]
        per_mask = []
        for t in positions:
            per_mask.append(_candidates(engine, w.payload.ids, t, scores[m, : w.payload.top_k].tolist(),
                                        tokens[m, : w.payload.top_k].tolist()))
            m += 1
        out.append(per_mask)
    return out


def _candidates(engine: Encoder, ids: list[int], position: int, scores: list[float],
                tokens: list[int]) -> list[dict[str, Any]]:
    out = []
    for score, token in zip(scores, tokens):
        filled = [*ids[:position], token, *ids[position + 1:]]
        out.append({"score": score, "token": token, "token_str": engine.tok.decode([token]),
                    "sequence": engine.tok.decode(filled[1:-1])})
    return out
