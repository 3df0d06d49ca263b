"""GPT (Radford et al. 2018) and GPT-2 (Radford et al. 2019): left-to-right transformer decoders.

Both are stacks of the shared :class:`~muppets.nn.block.TransformerBlock` with causal attention
over learned position embeddings, and a language-model head tied to the token embeddings.

* ``variant="gpt"`` — GPT-1: post-LN blocks (``x = LN(x + sublayer(x))``), no final LayerNorm,
  512 positions.
* ``variant="gpt2"`` — GPT-2 (§2.3): pre-LN blocks (``x = x + sublayer(LN(x))``), a LayerNorm
  after the last block, residual output projections initialised with std
  ``0.02 / sqrt(2 · n_layer)``, 1024 positions.

The backbone answers the ``Encoded`` contract of docs/concepts/architecture.md (embedding output
first, top layer last; for GPT-2 the top layer is after the final LayerNorm, as in Hugging Face's
hidden states).
Training computes the LM loss fused with the output layer (:mod:`muppets.nn.linear_ce`), so the
``(B, T, V)`` logits are never materialised; decoding uses a :class:`~muppets.nn.kv_cache.KVCache`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from muppets.config import from_dict
from muppets.errors import ConfigError
from muppets.nn import decode, decode_native
from muppets.nn.attention import SelfAttention
from muppets.nn.block import BlockConfig, TransformerBlock, init_weights
from muppets.nn.decode import DecodeWeights
from muppets.nn.decode_native import GPTStep
from muppets.nn.embeddings import InputEmbeddings
from muppets.nn.encoded import Encoded
from muppets.nn.feedforward import activation
from muppets.nn.kv_cache import KVCache
from muppets.nn.linear_ce import linear_cross_entropy

IGNORE = -100  # label of a position that has no next-token target
VARIANTS = ("gpt", "gpt2")


@dataclass
class GPTConfig:
    variant: str = "gpt2"  # gpt (GPT-1: post-LN, no final LN) | gpt2 (pre-LN + final LN, scaled residual init)
    vocab_size: int = 50257  # byte-level BPE vocabulary (GPT-2: 50,257 with <|endoftext|> = 50256)
    max_position_embeddings: int = 1024  # context length n_ctx (GPT-1: 512)
    hidden_size: int = 768  # model width H
    num_layers: int = 12  # decoder blocks L
    num_heads: int = 12  # attention heads A
    intermediate_size: int = 3072  # feed-forward inner width (4H)
    hidden_dropout: float = 0.1  # dropout on sub-layer outputs (resid_pdrop)
    embedding_dropout: float = 0.1  # dropout on token + position embeddings (embd_pdrop)
    attention_dropout: float = 0.1  # dropout on attention probabilities (attn_pdrop)
    layer_norm_eps: float = 1e-5  # LayerNorm epsilon
    initializer_range: float = 0.02  # std of the normal weight initialisation
    hidden_act: str = "gelu_new"  # feed-forward activation (GPT-2: tanh-approximated GELU)
    eos_token_id: int = -1  # <|endoftext|>: document separator, end of generation; -1 = the last id (GPT-2: 50256)

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ConfigError(f"variant: {self.variant!r} is not one of {', '.join(VARIANTS)}")
        if self.hidden_size % self.num_heads:
            raise ConfigError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if self.eos_token_id == -1:
            self.eos_token_id = self.vocab_size - 1
        if not 0 <= self.eos_token_id < self.vocab_size:
            raise ConfigError(f"eos_token_id {self.eos_token_id} is outside the vocabulary of {self.vocab_size}")
        activation(self.hidden_act)

    @classmethod
    def preset(cls, name: str, **overrides) -> "GPTConfig":
        """A named size (``gpt-tiny`` … ``gpt2-medium``), with field overrides."""
        if name not in GPT_PRESETS:
            raise ConfigError(f"unknown GPT preset {name!r}; choose one of {', '.join(GPT_PRESETS)}")
        variant, L, H, ctx = GPT_PRESETS[name]
        base = dict(variant=variant, num_layers=L, hidden_size=H, num_heads=max(1, H // 64),
                    intermediate_size=4 * H, max_position_embeddings=ctx)
        if variant == "gpt":
            base["hidden_act"] = "gelu"
        return from_dict(cls, {**base, **overrides})

    @property
    def max_positions(self) -> int:
        """The longest input: one position per token (BertConfig's counterpart)."""
        return self.max_position_embeddings

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def block(self) -> BlockConfig:
        return BlockConfig(
            hidden_size=self.hidden_size, num_heads=self.num_heads,
            intermediate_size=self.intermediate_size, hidden_dropout=self.hidden_dropout,
            attention_dropout=self.attention_dropout, layer_norm_eps=self.layer_norm_eps,
            norm_first=self.variant == "gpt2", causal=True, act=self.hidden_act,
        )


# name -> (variant, layers, hidden, context). gpt-tiny/mini/small are our CPU sizes; "gpt" is
# GPT-1 (117M), "gpt2" the 124M GPT-2 and "gpt2-medium" the 355M one.
GPT_PRESETS: dict[str, tuple[str, int, int, int]] = {
    "gpt-tiny": ("gpt2", 2, 128, 1024),
    "gpt-mini": ("gpt2", 4, 256, 1024),
    "gpt-small": ("gpt2", 6, 512, 1024),
    "gpt": ("gpt", 12, 768, 512),
    "gpt2": ("gpt2", 12, 768, 1024),
    "gpt2-medium": ("gpt2", 24, 1024, 1024),
}


class GPTBackbone(nn.Module):
    """Token + position embeddings, L causal blocks (+ final LN for GPT-2); returns ``Encoded``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embeddings = InputEmbeddings(
            cfg.vocab_size, cfg.hidden_size, cfg.max_position_embeddings, type_vocab_size=0,
            layer_norm=False, dropout=cfg.embedding_dropout,
        )
        self.layers = nn.ModuleList(TransformerBlock(cfg.block()) for _ in range(cfg.num_layers))
        self.final_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps) if cfg.variant == "gpt2" else None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                cache: KVCache | None = None) -> Encoded:
        """input_ids, attention_mask ``(B, T)`` -> Encoded with L+1 ``(B, T, H)`` layers.

        Without a cache, positions are ``0 .. T-1`` (pad on the right). With a ``cache`` the
        ids continue what it holds; positions count real tokens, so left-padded prompts work.
        """
        T = input_ids.shape[1]
        mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        if cache is None:
            self._check_length(T)
            positions, attn = None, None if attention_mask is None or bool(mask.all()) else mask[:, None, None, :]
        else:
            self._check_length(cache.length + T)
            positions, attn = cache.advance(None if attention_mask is None else mask, T)  # (B, T), (B, 1, T, S) or None
        x = self.embeddings(input_ids, position_ids=positions)  # (B, T, H)
        layers = [x]
        for i, block in enumerate(self.layers):
            x = block(x, attn, None if cache is None else cache.layers[i])
            layers.append(x)
        if self.final_norm is not None:
            layers[-1] = self.final_norm(x)
        return Encoded(layers=layers, mask=mask)

    def decode_step(self, input_ids: torch.Tensor, cache: KVCache,
                    weights: dict[int, tuple[torch.Tensor, torch.Tensor | None]],
                    modules: list[nn.Module] | None = None) -> torch.Tensor | None:
        """One decoding step of ``input_ids (B, 1)`` rows without padding, from the decoding
        copies ``weights`` (:attr:`~muppets.nn.decode.DecodeWeights.weights`): the top hidden
        state ``(B, H)``, the same values as :meth:`forward`'s (the same kernels on the same
        inputs), in about half the ops (no module calls, 2-D rows throughout). None, leaving the
        cache untouched, where it does not apply (padding, hooks, attention capture: ``modules``
        as in :meth:`steppable`): then call :meth:`forward`. No dropout: the copies exist only in
        eval mode."""
        if not self.steppable(input_ids, cache, modules):
            return None
        self._check_length(cache.length + 1)
        positions, _ = cache.advance(None, 1)  # (B, 1)
        emb = self.embeddings
        B, H = input_ids.shape[0], self.cfg.hidden_size
        heads, hd, eps = self.cfg.num_heads, self.cfg.head_dim, self.cfg.layer_norm_eps
        x = (emb.tokens(input_ids) + emb.positions(positions)).view(B, H)  # (B, H)
        end = cache.length
        for block, lc in zip(self.layers, cache.layers):
            attn, pre = block.attn, block.cfg.norm_first
            h = F.layer_norm(x, (H,), block.attn_norm.weight, block.attn_norm.bias, eps) if pre else x
            wt, b = weights[id(attn.qkv)]
            q, k, v = torch.addmm(b, h, wt).view(B, 3, heads, hd).unbind(1)  # each (B, heads, hd)
            lc.k.select(2, end - 1).copy_(k)  # the cache's buffers, as LayerCache.append writes them
            lc.v.select(2, end - 1).copy_(v)
            lc.length = end
            y = F.scaled_dot_product_attention(q[:, :, None], lc.k.narrow(2, 0, end), lc.v.narrow(2, 0, end))
            wt, b = weights[id(attn.out)]
            x = x + torch.addmm(b, y.view(B, H), wt)
            if not pre:
                x = F.layer_norm(x, (H,), block.attn_norm.weight, block.attn_norm.bias, eps)
            h = F.layer_norm(x, (H,), block.ffn_norm.weight, block.ffn_norm.bias, eps) if pre else x
            wt, b = weights[id(block.ffn.up)]
            u = block.ffn.act(torch.addmm(b, h, wt))
            wt, b = weights[id(block.ffn.down)]
            x = x + torch.addmm(b, u, wt)
            if not pre:
                x = F.layer_norm(x, (H,), block.ffn_norm.weight, block.ffn_norm.bias, eps)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x  # (B, H)

    def steppable(self, input_ids: torch.Tensor, cache: KVCache, modules: list[nn.Module] | None = None) -> bool:
        """May a decoding step of ``input_ids (B, 1)`` bypass :meth:`forward`? Not with padding
        in the cache, forward hooks (any module's, or global ones) or attention capture, which
        only forward serves. ``modules``: ``list(self.modules())`` when the caller keeps it
        (walking the module tree costs more than the rest of the check)."""
        return not (cache.padded or SelfAttention.record is not None or input_ids.shape[1] != 1 or any(
            m._forward_hooks or m._forward_pre_hooks or m.__dict__.get("record") is not None  # set by distillation
            for m in (self.modules() if modules is None else modules)) or nn.modules.module._global_forward_hooks
            or nn.modules.module._global_forward_pre_hooks)

    def _check_length(self, T: int) -> None:
        if T > self.cfg.max_position_embeddings:
            raise ValueError(f"sequence length {T} exceeds max_position_embeddings {self.cfg.max_position_embeddings}")

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        """An empty cache for ``batch`` rows of up to ``max_len`` tokens (prompt included)."""
        p = self.embeddings.tokens.weight
        return KVCache(batch, self.cfg.num_layers, self.cfg.num_heads, self.cfg.head_dim,
                       min(max_len, self.cfg.max_position_embeddings), p.dtype, p.device)


@dataclass
class LMOutput:
    """What :class:`GPTLanguageModel` returns.

    logits: ``(B, T, V)`` when no labels are given (None with labels: the loss is fused).
    loss_sums / counts / correct: for the ``lm`` term, the summed next-token cross entropy, the
        number of predicted tokens and how many the argmax got right.
    """

    encoded: Encoded
    logits: torch.Tensor | None
    loss_sums: dict[str, torch.Tensor] = field(default_factory=dict)
    counts: dict[str, torch.Tensor] = field(default_factory=dict)
    correct: dict[str, torch.Tensor] = field(default_factory=dict)


# A decoding step of fewer than BLOCKED_ROWS rows (B x T) runs the body from the copies laid out
# for a few rows (muppets.nn.decode); more rows take the weights as stored.
BLOCKED_ROWS = 8
# what a compiled batch-1 step's screen decided: a greedy token, top-k candidates
# (logits (1, N), ids (1, N)), or nothing
Decided = int | tuple[torch.Tensor, torch.Tensor] | None


class GPTLanguageModel(nn.Module):
    """Backbone + LM head tied to the token embeddings (no bias), as in GPT and GPT-2."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.backbone = GPTBackbone(cfg)
        self._decode: DecodeWeights | None = None  # see _decode_weights
        init_gpt_weights(self, cfg)

    @property
    def lm_weight(self) -> torch.Tensor:
        return self.backbone.embeddings.tokens.weight  # (V, H), tied

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> LMOutput:
        """input_ids, attention_mask, labels ``(B, T)``.

        ``labels`` are aligned with the inputs (pass ``labels=input_ids``): position ``t`` is
        scored on ``labels[:, t + 1]``; ``-100`` (and padding, if you set it so) is skipped.
        """
        encoded = self.backbone(input_ids, attention_mask)
        hidden = encoded.last  # (B, T, H)
        if labels is None:
            return LMOutput(encoded, F.linear(hidden, self.lm_weight))  # (B, T, V)
        rows, targets = _next_token_rows(hidden, labels)  # (M, H), (M,)
        loss, correct = linear_cross_entropy(rows, self.lm_weight, None, targets)  # no output bias
        return LMOutput(encoded, None, {"lm": loss}, {"lm": torch.tensor(float(targets.numel()))},
                        {"lm": correct})

    @torch.no_grad()
    def next_token_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                          cache: KVCache) -> torch.Tensor:
        """Feed ``(B, T)`` new tokens through the cache; the logits of the last one ``(B, V)``."""
        plan, hidden, _ = self._next_hidden(input_ids, attention_mask, cache)
        return F.linear(hidden, self.lm_weight) if plan is None else plan.logits(hidden)  # (B, V)

    @torch.no_grad()
    def next_token_argmax(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                          cache: KVCache) -> torch.Tensor:
        """``next_token_logits(...).argmax(-1)`` ``(B,)``, found without the float32 output layer
        where :class:`~muppets.nn.decode.GreedyScreen` can: the same tokens, except that among
        logits equal within float32 rounding the screen may pick a different one of them."""
        plan, hidden, token = self._next_hidden(input_ids, attention_mask, cache, greedy=True)
        if token is not None:  # the compiled step's screen decided
            return torch.tensor([token])
        return F.linear(hidden, self.lm_weight).argmax(-1) if plan is None else plan.greedy(hidden)  # (B,)

    @torch.no_grad()
    def next_token_top_k(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                         cache: KVCache, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What top-k sampling needs of ``next_token_logits(...)``: the logits of every token that
        may be among a row's ``k`` largest ``(B, N)`` and their ids ``(B, N)``, found without the
        float32 output layer where :meth:`~muppets.nn.decode.DecodeWeights.top_k` can; else all
        logits ``(B, V)`` and None."""
        plan, hidden, found = self._next_hidden(input_ids, attention_mask, cache, top_k=k)
        if found is not None:  # the compiled step's screen decided
            return found
        return (F.linear(hidden, self.lm_weight), None) if plan is None else plan.top_k(hidden, k)

    def _next_hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, cache: KVCache,
                     greedy: bool = False, top_k: int = 0) -> tuple[DecodeWeights | None, torch.Tensor, Decided]:
        """Feed ``(B, T)`` new tokens through the cache: the decoding copies (None in training
        mode, which keeps none: the weights are about to change), the top hidden state of the
        last token ``(B, H)`` and what the compiled batch-1 step's screen decided (else None):
        when ``greedy``, the token; with ``top_k``, the candidates ``(logits (1, N), ids (1, N))``."""
        plan = None if self.training else self._decode_weights()
        B, T = input_ids.shape
        if plan is not None and B * T < BLOCKED_ROWS:  # matrix-vector products: see muppets.nn.decode
            if T == 1 and attention_mask is None:
                # the module list is kept with the copies: a module swapped in eval mode is not
                # seen by them either (see muppets.nn.decode); model.train() drops both
                modules = plan.derived("modules", lambda: list(self.backbone.modules()))
                plain = self.backbone.steppable(input_ids, cache, modules)
                step = self._compiled_step(plan) if B == 1 and plain else None
                if step is not None and step.accepts(input_ids, cache):
                    self.backbone._check_length(cache.length + 1)
                    if greedy or top_k:
                        step.attach_screen(plan.exact_input_screen)
                    out = step(input_ids, cache, torch.get_num_threads(), greedy=greedy, top_k=top_k)
                    return plan, out.hidden, out.token if greedy else out.top
                hidden = self.backbone.decode_step(input_ids, cache, plan.weights, modules) if plain else None
                if hidden is not None:
                    return plan, hidden, None
            with decode.use(plan):
                return plan, self.backbone(input_ids, attention_mask, cache).last[:, -1], None  # (B, H)
        return plan, self.backbone(input_ids, attention_mask, cache).last[:, -1], None  # a prompt or many rows

    def _compiled_step(self, plan: DecodeWeights) -> GPTStep | None:
        """The batch-1 step as one compiled call (:mod:`muppets.nn.decode_native`), made once per
        set of decoding copies; None without a C compiler (then :meth:`GPTBackbone.decode_step`)."""
        if not decode_native.ENABLED:
            return None
        return plan.derived("gpt_step", lambda: GPTStep.build(self.backbone))

    def _decode_weights(self) -> DecodeWeights:
        """The decoding copies of the weights (:class:`~muppets.nn.decode.DecodeWeights`),
        remade when a weight has changed (the contract in :mod:`muppets.nn.decode`)."""
        plan = self._decode
        if plan is not None and plan.current(self.lm_weight) and (not decode.needs_probe(plan) or plan.probe()):
            decode.mark_probed(plan)
            return plan
        with decode.BUILD_LOCK:  # threads decoding this model at once build one set of copies
            plan = self._decode
            if plan is None or not plan.current(self.lm_weight) or not plan.probe():
                self._decode = plan = None  # free the old copies first
                layers = [m for block in self.backbone.layers
                          for m in (block.attn.qkv, block.attn.out, block.ffn.up, block.ffn.down)]
                ids = {id(p) for m in layers for p in m.parameters()} | {id(self.lm_weight)}
                watched = [p for p in self.backbone.parameters() if id(p) not in ids]  # norms, positions
                plan = self._decode = DecodeWeights(layers, self.lm_weight, watched)
        decode.mark_probed(plan)
        return plan

    def weights_changed(self) -> None:
        """Drop the decoding copies: call after writing weights in a way that bypasses autograd's
        version counter (in-place on ``p.data``, numpy views) and may leave whole rows unchanged."""
        self._decode = None

    def __getstate__(self) -> dict:
        """Copies and pickles leave the decoding copies behind (derived data, remade on first use;
        the compiled step holds raw pointers, which cannot be copied)."""
        state = self.__dict__.copy()
        state["_decode"] = None
        return state

    def train(self, mode: bool = True) -> "GPTLanguageModel":
        if mode:
            self._decode = None  # weights are about to change: no stale copies held in memory
        return super().train(mode)


def _next_token_rows(hidden: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ``hidden (B, T, H)`` that predict a label at ``t + 1``: ``(M, H)`` and ``(M,)``."""
    H = hidden.shape[-1]
    h = hidden[:, :-1].reshape(-1, H)  # (B*(T-1), H)
    y = labels[:, 1:].reshape(-1)  # (B*(T-1),)
    keep = y != IGNORE
    if bool(keep.all()):
        return h, y
    return h[keep], y[keep]


def init_gpt_weights(model: nn.Module, cfg: GPTConfig) -> None:
    """N(0, 0.02) everywhere (:func:`~muppets.nn.block.init_weights`); for GPT-2 the residual
    output projections (attention out, feed-forward down) get std ``0.02 / sqrt(2L)`` (§2.3)."""
    init_weights(model, cfg.initializer_range)
    if cfg.variant != "gpt2":
        return
    std = cfg.initializer_range / math.sqrt(2 * cfg.num_layers)
    for name, p in model.named_parameters():
        if name.endswith(("attn.out.weight", "ffn.down.weight")):
            nn.init.normal_(p, 0.0, std)


def resize_token_embeddings(model: GPTLanguageModel, vocab_size: int) -> None:
    """Grow the (tied) token embeddings to ``vocab_size`` rows, e.g. for GPT's added task tokens;
    old rows are kept, new ones drawn from N(0, initializer_range)."""
    old = model.backbone.embeddings.tokens
    if vocab_size < old.num_embeddings:
        raise ConfigError(f"cannot shrink the vocabulary from {old.num_embeddings} to {vocab_size}")
    new = nn.Embedding(vocab_size, old.embedding_dim).to(old.weight.device, old.weight.dtype)
    with torch.no_grad():
        new.weight.normal_(0.0, model.cfg.initializer_range)
        new.weight[: old.num_embeddings] = old.weight
    model.backbone.embeddings.tokens = new
    model.cfg.vocab_size = model.backbone.cfg.vocab_size = vocab_size
