"""A (Bi)LSTM over right-padded batches that never reads the padding."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def packed_lstm(lstm: nn.LSTM, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``lstm`` (``batch_first``) over ``x (B, T, D)`` with ``mask (B, T)`` (True at real
    tokens, right padding): ``(B, T, directions * hidden)``, zero at padding.

    The rows are packed to their lengths, so the backward direction of a row starts at its own
    last token and a row's states do not depend on what it is batched with.
    """
    lengths = mask.sum(1).clamp_min(1).cpu()  # (B,); an empty row reads its first position
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    states, _ = pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=x.shape[1])
    return states  # (B, T, directions * hidden)
