"""``/v1/completions``: batched generation with :func:`muppets.generate.generate`, streamed or not.

Requests whose sampling settings agree (greedy; or the same temperature, top-k, top-p and
repetition penalty) share a batch: the prompts are left-padded and decoded together with the KV
cache, each row ending on its own (end-of-text, its ``max_tokens``, one of its ``stop`` strings,
or its client gone). Greedy rows give the tokens the offline ``generate`` gives each prompt
alone (see :mod:`muppets.generate` on float32 ties). A seeded sampling request runs alone, so
its draws do not depend on what else is queued.

Streamed text is released as in :func:`muppets.generate.generate_text`: a character split over
byte-level tokens, or text that may begin a stop string, is held back until it is settled.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from muppets.generate import GenerationConfig, _cut_at_stop, _settled, generate
from muppets.serve.batcher import Work
from muppets.serve.engines import COMPLETE, LMEngine
from muppets.serve.errors import ApiError

_solo = itertools.count()  # keys that no other request shares


@dataclass(frozen=True)
class Sampling:
    """The settings rows of one batch must share."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop_at_eos: bool = True  # False: rows run to max_tokens (benchmarks; vLLM's ignore_eos)


@dataclass
class Prompt:
    """One row to complete."""

    ids: list[int]
    max_tokens: int
    stops: tuple[str, ...] = ()
    on_text: Callable[[str], None] | None = None  # streaming: called (worker thread) with new settled text


def completion_items(engine: LMEngine, prompts: Sequence[list[int]], max_tokens: int, stops: Sequence[str],
                     sampling: Sampling, on_text: Sequence[Callable[[str], None] | None] | None = None) -> list[Work]:
    """Work items for token-id prompts; a prompt that leaves no room for ``max_tokens`` is a 400."""
    solo = sampling.do_sample and sampling.seed is not None
    key = (COMPLETE, sampling, next(_solo) if solo else None)
    items = []
    for i, ids in enumerate(prompts):
        if len(ids) + max_tokens > engine.positions:
            raise ApiError(400, f"prompt {i} has {len(ids)} tokens and asks for {max_tokens} more; this model's "
                                f"context is {engine.positions} tokens", param="max_tokens",
                           code="context_length_exceeded")
        callback = on_text[i] if on_text else None
        items.append(Work(key, len(ids) + max_tokens, Prompt(ids, max_tokens, tuple(stops), callback)))
    return items


def complete_batch(engine: LMEngine, key: Hashable, items: list[Work]) -> list[dict[str, Any]]:
    """Worker thread: ``{"text", "tokens", "finish_reason"}`` per item."""
    done: dict[int, dict[str, Any]] = {}
    for group in _fitting_groups(items, engine.positions):
        for w, result in zip(group, _complete(engine, key[1], group)):
            done[id(w)] = result
    return [done[id(w)] for w in items]


def _fitting_groups(items: list[Work], positions: int) -> list[list[Work]]:
    """Split so that in each group the longest prompt + the largest max_tokens fit the context
    (:func:`generate` would otherwise cap every row's new tokens)."""
    groups: list[list[Work]] = []
    for w in sorted(items, key=lambda w: len(w.payload.ids)):
        g = groups[-1] if groups else None
        if g and len(w.payload.ids) + max(x.payload.max_tokens for x in (*g, w)) <= positions:
            g.append(w)
        else:
            groups.append([w])
    return groups


def _complete(engine: LMEngine, sampling: Sampling, items: list[Work]) -> list[dict[str, Any]]:
    rows = [w.payload for w in items]
    decode = engine.tok.decode
    cfg = GenerationConfig(max_new_tokens=max(p.max_tokens for p in rows), do_sample=sampling.do_sample,
                           temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
                           repetition_penalty=sampling.repetition_penalty, seed=sampling.seed,
                           stop_at_eos=sampling.stop_at_eos)
    shown = [0] * len(rows)

    def on_token(row: int, token: int) -> None:
        if rows[row].on_text is not None:
            _release(rows[row], decode(tokens_so_far[row] + [token]), shown, row)
        tokens_so_far[row].append(token)

    def should_stop(row: int, tokens: list[int]) -> bool:
        p = rows[row]
        if len(tokens) >= p.max_tokens or items[row].ticket.cancelled:
            return True
        return bool(p.stops) and any(s in decode(tokens) for s in p.stops)

    tokens_so_far: list[list[int]] = [[] for _ in rows]
    new = generate(engine.model, [p.ids for p in rows], cfg, on_token=on_token, should_stop=should_stop)
    results = []
    for row, (p, tokens) in enumerate(zip(rows, new)):
        full = decode(tokens)
        text = _cut_at_stop(full, p.stops)
        if p.on_text is not None and len(text) > shown[row]:  # held back, and not a stop after all
            p.on_text(text[shown[row]:])
        finish = "length" if len(tokens) >= p.max_tokens and text == full else "stop"
        results.append({"text": text, "tokens": tokens, "finish_reason": finish})
    return results


def _release(prompt: Prompt, text: str, shown: list[int], row: int) -> None:
    settled = _settled(text, prompt.stops)
    if len(settled) > shown[row]:
        prompt.on_text(settled[shown[row]:])
        shown[row] = len(settled)
