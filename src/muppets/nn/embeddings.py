"""Input embeddings: token + (segment) + learned position, then optional LayerNorm and dropout."""

from __future__ import annotations

import torch
from torch import nn

from muppets.nn.dropout import dropout


class InputEmbeddings(nn.Module):
    """``(B, T)`` ids -> ``(B, T, H)`` vectors.

    BERT uses all three tables plus LayerNorm (Devlin et al. 2019, Fig. 2); GPT-2 and DistilBERT
    use ``type_vocab_size=0`` (GPT-2 also ``layer_norm=False``). A model with ONE token type
    (RoBERTa, XLM-R) adds that row to every position whatever segment ids it is given: its
    pretraining never saw a second segment, and task features that mark one (span windows) then
    read as its tokenizer's pairs do (all type 0).
    """

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        max_positions: int,
        type_vocab_size: int = 0,
        layer_norm: bool = True,
        eps: float = 1e-12,
        dropout: float = 0.1,
        padding_idx: int | None = None,
    ) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, hidden_size, padding_idx=padding_idx)
        self.positions = nn.Embedding(max_positions, hidden_size)
        self.segments = nn.Embedding(type_vocab_size, hidden_size) if type_vocab_size else None
        self.norm = nn.LayerNorm(hidden_size, eps=eps) if layer_norm else None
        self.dropout = dropout

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids, token_type_ids, position_ids: ``(B, T)`` -> ``(B, T, H)``.

        Positions default to ``0 .. T-1``; decoding with a KV cache passes its own.
        """
        T = input_ids.shape[1]
        if position_ids is None:
            x = self.tokens(input_ids) + self.positions.weight[:T]  # (B, T, H) + (T, H)
        else:
            x = self.tokens(input_ids) + self.positions(position_ids)  # (B, T, H)
        if self.segments is not None:
            if token_type_ids is None or self.segments.num_embeddings == 1:
                x = x + self.segments.weight[0]
            else:
                x = x + self.segments(token_type_ids)
        if self.norm is not None:
            x = self.norm(x)
        return dropout(x, self.dropout, self.training)
