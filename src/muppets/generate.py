"""Text generation from a left-to-right language model with a KV cache.

Greedy decoding, sampling (temperature, top-k, top-p), beam search with a length penalty, a
repetition penalty, ``max_new_tokens``, end-of-text and stop strings, batched prompts (left
padded: each row's positions count its real tokens, so a batch gives the same tokens as each
prompt alone, except where two logits are equal within float32 rounding: a batch's products sum
in another order) and streaming. Each step feeds only the new token through the model, whose
keys and values for the prefix are kept in a :class:`~muppets.nn.kv_cache.KVCache`.

Usage::

    from muppets.generate import GenerationConfig, generate_text
    texts = generate_text(model, tokenizer, ["The meaning of life is"],
                          GenerationConfig(max_new_tokens=20, do_sample=True, top_p=0.9, seed=1))

``model`` is anything with ``backbone.new_cache(batch, max_len)``,
``next_token_logits(ids, mask, cache) -> (B, V)`` and ``cfg.eos_token_id``
(:class:`muppets.models.gpt.GPTLanguageModel`); greedy decoding without a repetition penalty
uses ``next_token_argmax(ids, mask, cache) -> (B,)`` instead when the model has it (GPT's
:class:`~muppets.nn.decode.GreedyScreen`: the float32 argmax, except that among logits equal
within float32 rounding the screen may pick a different one of them), and sampling with top-k
``next_token_top_k(ids, mask, cache, k) -> (logits (B, N), ids (B, N) or None)``, the logits of
the tokens that may be among the k largest (the same screen; the filtered distribution is the
full logits').
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from muppets.errors import ConfigError
from muppets.nn import decode, dropout
from muppets.nn.decode import greedy_argmax

log = logging.getLogger(__name__)

OnToken = Callable[[int, int], None]  # (row, token id), called as each token is chosen


@dataclass
class GenerationConfig:
    max_new_tokens: int = 64  # tokens generated after the prompt (at most)
    do_sample: bool = False  # False: the most likely token (greedy, or beams); True: sample
    temperature: float = 1.0  # sampling: logits / temperature (< 1 sharper, > 1 flatter)
    top_k: int = 0  # sampling: keep the k most likely tokens (0 = all)
    top_p: float = 1.0  # sampling: keep the smallest set with probability >= p (nucleus; 1 = all)
    num_beams: int = 1  # beam search width (1 = no beam search); not with do_sample
    length_penalty: float = 1.0  # beams: score = sum log p / new_length ** length_penalty
    repetition_penalty: float = 1.0  # > 1 discourages tokens already in the row (CTRL, Keskar et al. 2019)
    stop: list[str] = field(default_factory=list)  # generate_text: end a row at any of these strings (cut off)
    stop_at_eos: bool = True  # end a row when it produces the end-of-text token
    seed: int | None = None  # sampling: seed of a private generator (None = the global one)

    def __post_init__(self) -> None:
        checks = [("max_new_tokens", self.max_new_tokens >= 0), ("temperature", self.temperature > 0),
                  ("top_k", self.top_k >= 0), ("top_p", 0.0 < self.top_p <= 1.0),
                  ("num_beams", self.num_beams >= 1), ("repetition_penalty", self.repetition_penalty > 0)]
        for name, ok in checks:
            if not ok:
                raise ConfigError(f"{name}: invalid value {getattr(self, name)!r}", key=name)
        if self.do_sample and self.num_beams > 1:
            raise ConfigError("num_beams > 1 is beam search; it cannot be combined with do_sample")


# ----------------------------------------------------------------------------- logits


def penalise_repetition(logits: torch.Tensor, seen: torch.Tensor, seen_mask: torch.Tensor,
                        penalty: float) -> torch.Tensor:
    """Divide positive (multiply negative) logits of tokens in ``seen (B, S)`` by ``penalty``.

    logits: ``(B, V)``; seen_mask ``(B, S)`` marks real tokens (padding is not penalised).
    """
    if penalty == 1.0:
        return logits
    counts = torch.zeros(logits.shape, dtype=torch.long, device=logits.device)
    hit = counts.scatter_add_(1, seen, seen_mask.long()) > 0  # (B, V): token occurs in the row
    penalised = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(hit, penalised, logits)


def filter_logits(logits: torch.Tensor, cfg: GenerationConfig) -> torch.Tensor:
    """Temperature, then top-k, then top-p, as ``-inf`` on removed tokens. ``(B, V) -> (B, V)``."""
    logits = logits / cfg.temperature if cfg.temperature != 1.0 else logits
    if 0 < cfg.top_k < logits.shape[-1]:
        kth = logits.topk(cfg.top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (B, V)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) >= cfg.top_p  # mass before this token already >= p
        logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return logits


def choose(logits: torch.Tensor, cfg: GenerationConfig, generator: torch.Generator | None,
           candidates: bool = False) -> torch.Tensor:
    """The next token of each row: argmax, or a draw from the filtered distribution. ``(B,)``.
    ``candidates``: ``logits (B, N)`` hold each row's ``cfg.top_k`` largest logits (a screen's
    candidates, ``N >= k``), not the whole vocabulary: then even ``N == k`` draws in ``topk``'s
    order, as from the full logits, so a seeded draw does not depend on how many candidates came."""
    if not cfg.do_sample:
        return greedy_argmax(logits)
    logits = logits.float()
    # draw among the k kept tokens only (a (B, V) draw costs ~1 ms a row), in topk's order
    if 0 < cfg.top_k < logits.shape[-1] or (candidates and cfg.top_k == logits.shape[-1]):
        logits = logits / cfg.temperature if cfg.temperature != 1.0 else logits  # as filter_logits scales
        top, index = logits.topk(cfg.top_k, dim=-1)  # (B, k), (B, k)
        if bool((logits >= top[:, -1:]).sum(-1).eq(cfg.top_k).all()):  # no tie at the k-th: what top-k keeps
            probs = filter_logits(top, dataclasses.replace(cfg, temperature=1.0, top_k=0)).softmax(-1)  # (B, k)
            return index.gather(1, torch.multinomial(probs, 1, generator=generator)).squeeze(1)
        cfg = dataclasses.replace(cfg, temperature=1.0)  # already scaled
    probs = filter_logits(logits, cfg).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


# ----------------------------------------------------------------------------- decoding


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts -> ids ``(B, T)`` padded on the left with ``pad_id``, and the mask ``(B, T)`` bool."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ConfigError("every prompt needs at least one token (start with <|endoftext|> for none)")
    T = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), T), pad_id, dtype=torch.long)
    mask = torch.zeros(len(prompts), T, dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, T - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
        mask[i, T - len(p):] = True
    return ids, mask


@torch.no_grad()
def generate(model, prompts: Sequence[Sequence[int]], cfg: GenerationConfig | None = None,
             on_token: OnToken | None = None,
             should_stop: Callable[[int, list[int]], bool] | None = None) -> list[list[int]]:
    """The new tokens for each prompt (the prompt itself is not repeated).

    Safe from many threads at once on one model: the model's mode is left as it is (dropout is
    off for this call's thread only), and decoding starts no thread and changes no torch setting.
    The weights must not change during the call (see :mod:`muppets.nn.decode` for what is seen
    between calls).

    Args:
        prompts: token ids per prompt (any lengths; batched with left padding).
        on_token: called with ``(row, token)`` as tokens are chosen (greedy/sampling only).
        should_stop: called with ``(row, new tokens so far)`` after each token; True ends the row.
    """
    cfg = cfg or GenerationConfig()
    room = model.cfg.max_position_embeddings - max((len(p) for p in prompts), default=0)
    if room < cfg.max_new_tokens:  # the position table ends: generate what fits
        if room < 1:
            raise ConfigError(f"a prompt fills all {model.cfg.max_position_embeddings} positions; "
                              "shorten it to leave room for new tokens")
        log.info("max_new_tokens %d capped at %d: the model has %d positions", cfg.max_new_tokens,
                 room, model.cfg.max_position_embeddings)
        cfg = dataclasses.replace(cfg, max_new_tokens=room)
    # The model's mode is left alone (another thread may be training it): dropout is off on this
    # thread only, and the decoding copies are checked once for the whole call.
    with dropout.suppressed(), decode.session():
        if cfg.num_beams > 1:
            return _beam_search(model, prompts, cfg)
        return _sample(model, prompts, cfg, on_token, should_stop)


def _sample(model, prompts, cfg: GenerationConfig, on_token: OnToken | None, should_stop) -> list[list[int]]:
    """Greedy or sampled decoding of all rows at once; a finished row is fed end-of-text."""
    eos = model.cfg.eos_token_id
    device = _device_of(model)
    ids, mask = (t.to(device) for t in left_pad(prompts, eos))
    B = ids.shape[0]
    cache = model.backbone.new_cache(B, ids.shape[1] + cfg.max_new_tokens)
    generator = (torch.Generator(device).manual_seed(cfg.seed)
                 if cfg.seed is not None and cfg.do_sample else None)
    seen, seen_mask = ids, mask
    out: list[list[int]] = [[] for _ in range(B)]
    done = [False] * B
    # plain greedy asks the model for the argmax alone (GPTLanguageModel finds it without the
    # float32 output layer: muppets.nn.decode.GreedyScreen)
    argmax_only = not cfg.do_sample and cfg.repetition_penalty == 1.0 and hasattr(model, "next_token_argmax")
    # top-k sampling needs only the logits of the tokens that can be among the k largest (the
    # same screen finds them): the filtered distribution is that of the full logits
    top_k_only = (cfg.do_sample and cfg.top_k > 0 and cfg.repetition_penalty == 1.0
                  and hasattr(model, "next_token_top_k"))

    def next_tokens(new_ids: torch.Tensor, new_mask: torch.Tensor | None) -> torch.Tensor:  # (B,)
        if argmax_only:
            return model.next_token_argmax(new_ids, new_mask, cache)
        if top_k_only:
            logits, token_ids = model.next_token_top_k(new_ids, new_mask, cache, cfg.top_k)  # (B, N), (B, N)
            picked = choose(logits, cfg, generator, candidates=token_ids is not None)  # (B,) columns of logits
            return picked if token_ids is None else token_ids.gather(1, picked[:, None]).squeeze(1)
        logits = model.next_token_logits(new_ids, new_mask, cache)  # (B, V)
        logits = penalise_repetition(logits, seen, seen_mask, cfg.repetition_penalty)
        return choose(logits, cfg, generator)

    for step in range(cfg.max_new_tokens):
        nxt = next_tokens(ids, mask) if step == 0 else next_tokens(nxt[:, None], None)
        if any(done):
            nxt = torch.where(torch.tensor(done, device=device), torch.full_like(nxt, eos), nxt)
        for row, token in enumerate(nxt.tolist()):
            if not done[row]:
                done[row] = _take(row, token, out, cfg, eos, on_token, should_stop)
        if all(done):
            break
        if cfg.repetition_penalty != 1.0:
            seen = torch.cat([seen, nxt[:, None]], 1)
            seen_mask = torch.cat([seen_mask, torch.ones(B, 1, dtype=torch.bool, device=device)], 1)
    return out


def _device_of(model) -> torch.device:
    """Where the model's weights are: the prompts, the cache and the sampling generator go there."""
    return next(model.parameters()).device


def _take(row: int, token: int, out: list[list[int]], cfg: GenerationConfig, eos: int,
          on_token: OnToken | None, should_stop) -> bool:
    """Record ``token`` for ``row``; True when the row is finished."""
    if cfg.stop_at_eos and token == eos:
        return True
    out[row].append(token)
    if on_token is not None:
        on_token(row, token)
    return bool(should_stop and should_stop(row, out[row]))


# ----------------------------------------------------------------------------- beam search


@dataclass
class _Hypotheses:
    """The finished beams of one prompt (at most ``size``), scored with the length penalty."""

    size: int
    length_penalty: float
    items: list[tuple[float, list[int]]] = field(default_factory=list)

    def add(self, tokens: list[int], sum_logprobs: float) -> None:
        score = sum_logprobs / max(len(tokens), 1) ** self.length_penalty
        self.items.append((score, tokens))
        self.items.sort(key=lambda x: -x[0])
        del self.items[self.size:]

    def is_done(self, best_running: float, new_length: int) -> bool:
        """Full, and no running beam can still beat the worst kept one (HF's early_stopping=False)."""
        if len(self.items) < self.size:
            return False
        return self.items[-1][0] >= best_running / max(new_length, 1) ** self.length_penalty


def _beam_search(model, prompts, cfg: GenerationConfig) -> list[list[int]]:
    """Keep ``num_beams`` best partial outputs per prompt by summed log probability."""
    eos, K, device = model.cfg.eos_token_id, cfg.num_beams, _device_of(model)
    ids, mask = (t.to(device) for t in left_pad(prompts, eos))
    P = ids.shape[0]
    ids, mask = ids.repeat_interleave(K, 0), mask.repeat_interleave(K, 0)  # (P*K, T)
    cache = model.backbone.new_cache(P * K, ids.shape[1] + cfg.max_new_tokens)
    scores = torch.zeros(P, K, device=device)
    scores[:, 1:] = float("-inf")  # the K copies start equal: only one may expand at step 1
    beams: list[list[int]] = [[] for _ in range(P * K)]
    hyps = [_Hypotheses(K, cfg.length_penalty) for _ in range(P)]
    done = [False] * P
    logits = model.next_token_logits(ids, mask, cache)  # (P*K, V)
    seen, seen_mask = ids, mask
    for step in range(cfg.max_new_tokens):
        logp = logits.float().log_softmax(-1)  # (P*K, V); the penalty acts on log-probs here, as in HF
        logp = penalise_repetition(logp, seen, seen_mask, cfg.repetition_penalty)
        logp = logp.view(P, K, -1) + scores[:, :, None]  # (P, K, V)
        V = logp.shape[-1]
        top, flat = (t.cpu() for t in logp.view(P, K * V).topk(2 * K, dim=-1))  # (P, 2K), read one by one on the host
        parents, tokens, scores = _select(top, flat // V, flat % V, beams, hyps, done, K, eos, cfg, step + 1)
        if all(done):
            break
        beams = [beams[int(p)] + [int(t)] for p, t in zip(parents, tokens)]
        if step + 1 == cfg.max_new_tokens:  # no logits needed after the last token
            break
        parents, tokens, scores = parents.to(device), tokens.to(device), scores.to(device)
        cache.reorder(parents)
        seen = torch.cat([seen.index_select(0, parents), tokens[:, None]], 1)
        seen_mask = torch.cat([seen_mask.index_select(0, parents), torch.ones(P * K, 1, dtype=torch.bool, device=device)], 1)
        logits = model.next_token_logits(tokens[:, None], None, cache)
    for p in range(P):
        if not done[p]:
            for k in range(K):
                hyps[p].add(beams[p * K + k], float(scores[p, k]))
    return [h.items[0][1] for h in hyps]


def _select(top: torch.Tensor, parent: torch.Tensor, token: torch.Tensor, beams, hyps, done,
            K: int, eos: int, cfg: GenerationConfig, new_length: int):
    """From the 2K best candidates per prompt, finish those ending in end-of-text and keep the
    K best others. Returns parent rows ``(P*K,)``, tokens ``(P*K,)`` and scores ``(P, K)``."""
    P = top.shape[0]
    parents, tokens = torch.zeros(P * K, dtype=torch.long), torch.full((P * K,), eos, dtype=torch.long)
    scores = torch.full((P, K), float("-inf"))
    for p in range(P):
        if done[p]:
            parents[p * K:(p + 1) * K] = p * K
            continue
        kept = 0
        for rank in range(top.shape[1]):
            row, tok, s = p * K + int(parent[p, rank]), int(token[p, rank]), float(top[p, rank])
            if cfg.stop_at_eos and tok == eos:
                if rank < K:  # only a candidate among the K best may finish (as in HF)
                    hyps[p].add(beams[row], s)
                continue
            parents[p * K + kept], tokens[p * K + kept], scores[p, kept] = row, tok, s
            kept += 1
            if kept == K:
                break
        done[p] = hyps[p].is_done(float(scores[p].max()), new_length)
    return parents, tokens, scores


# ----------------------------------------------------------------------------- text


def generate_text(model, tokenizer, prompts: Sequence[str], cfg: GenerationConfig | None = None,
                  stream: Callable[[int, str], None] | None = None) -> list[str]:
    """Generate from text prompts; returns each continuation, cut before the first stop string.

    stream: called with ``(row, new text)`` as text becomes final: a character split over
        several byte-level tokens, or text that may be the start of a stop string, is held back.
    """
    cfg = cfg or GenerationConfig()
    new_tokens: list[list[int]] = [[] for _ in prompts]
    shown = [0] * len(prompts)  # characters already streamed per row

    def on_token(row: int, token: int) -> None:
        new_tokens[row].append(token)
        if stream is not None:
            text = _settled(tokenizer.decode(new_tokens[row]), cfg.stop)
            if len(text) > shown[row]:
                stream(row, text[shown[row]:])
                shown[row] = len(text)

    def should_stop(row: int, tokens: list[int]) -> bool:
        text = tokenizer.decode(tokens)
        return any(s in text for s in cfg.stop)

    done = generate(model, [tokenizer.encode(p) for p in prompts], cfg, on_token=on_token,
                    should_stop=should_stop if cfg.stop else None)
    texts = [_cut_at_stop(tokenizer.decode(t), cfg.stop) for t in done]
    if stream is not None:
        for row, text in enumerate(texts):  # what was held back and turned out not to be a stop
            if len(text) > shown[row]:
                stream(row, text[shown[row]:])
    return texts


def _cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """``text`` up to (not including) the earliest stop string."""
    cut = len(text)
    for s in stops:
        i = text.find(s)
        if i != -1:
            cut = min(cut, i)
    return text[:cut]


def _settled(text: str, stops: Sequence[str]) -> str:
    """The part of a growing ``text`` that can no longer change: cut at a stop string, without a
    trailing incomplete character (U+FFFD) or a suffix that could begin a stop string."""
    text = _cut_at_stop(text, stops).rstrip("\ufffd")
    hold = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:n]):
                hold = n
                break
    return text[:len(text) - hold]
