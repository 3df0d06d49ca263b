"""The one transformer block every transformer model in muppets is built from.

``norm_first=False`` is the post-LN block of the original Transformer and BERT:
``x = LN(x + Drop(Attn(x))); x = LN(x + Drop(FFN(x)))``.
``norm_first=True`` is the pre-LN block of GPT-2 (Radford et al. 2019, §2.3):
``x = x + Drop(Attn(LN(x))); x = x + Drop(FFN(LN(x)))``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from muppets.nn.attention import SelfAttention
from muppets.nn.dropout import dropout
from muppets.nn.feedforward import FeedForward
from muppets.nn.kv_cache import LayerCache
from muppets.nn.packing import Packing


@dataclass
class BlockConfig:
    hidden_size: int  # model width H
    num_heads: int  # attention heads; H / num_heads is the head size
    intermediate_size: int  # feed-forward inner width, usually 4H
    hidden_dropout: float = 0.1  # dropout on each sub-layer's output before the residual add
    attention_dropout: float = 0.1  # dropout on attention probabilities
    layer_norm_eps: float = 1e-12  # LayerNorm epsilon (BERT 1e-12, GPT-2 1e-5)
    norm_first: bool = False  # False: post-LN (BERT); True: pre-LN (GPT-2)
    causal: bool = False  # left-to-right attention (GPT)
    act: str = "gelu"  # feed-forward activation


class TransformerBlock(nn.Module):
    """Self-attention + feed-forward with residuals; ``(B, T, H) -> (B, T, H)``."""

    def __init__(self, cfg: BlockConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.attn = SelfAttention(cfg.hidden_size, cfg.num_heads, cfg.attention_dropout, cfg.causal)
        self.attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.ffn = FeedForward(cfg.hidden_size, cfg.intermediate_size, cfg.act)
        self.ffn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                cache: LayerCache | None = None, packing: Packing | None = None) -> torch.Tensor:
        """x: ``(B, T, H)``, or the real tokens ``(N, H)`` with ``packing`` (everything but the
        attention is token-wise); attn_mask: bool (True = attend) or None, ``(B, 1, 1, T)``, or
        ``(B, 1, T, S)`` with a ``cache`` (see :class:`~muppets.nn.attention.SelfAttention`)."""
        p = self.cfg.hidden_dropout if self.training else 0.0
        if self.cfg.norm_first:
            x = x + dropout(self.attn(self.attn_norm(x), attn_mask, cache, packing), p, self.training)
            return x + dropout(self.ffn(self.ffn_norm(x)), p, self.training)
        x = self.attn_norm(x + dropout(self.attn(x, attn_mask, cache, packing), p, self.training))
        return self.ffn_norm(x + dropout(self.ffn(x), p, self.training))


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """The one weight initialisation (BERT / GPT: truncated-free normal(0, std)).

    Linear and Embedding weights ~ N(0, std); biases 0; LayerNorm weight 1, bias 0; an
    Embedding's ``padding_idx`` row is zeroed (as Hugging Face BERT does). Model-specific
    extras (GPT-2's residual scaling by 1/sqrt(2L)) are applied by the model after this.
    """
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
