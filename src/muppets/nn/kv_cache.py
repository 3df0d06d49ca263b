"""Key/value cache for left-to-right decoding (GPT): each new token attends to the keys and
values already computed instead of recomputing the whole prefix every step.

Buffers are allocated once for the longest sequence a generation can reach, so a decoding step
writes its ``T`` new keys in place (no ``torch.cat`` of the whole past per step and layer).
The cache also keeps which key slots hold real tokens (left padding of batched prompts) and the
next position id of every row, so the backbone can build masks and positions from it alone.
"""

from __future__ import annotations

import torch


class LayerCache:
    """One attention layer's keys and values: buffers ``(B, heads, max_len, head_dim)``."""

    def __init__(self, batch: int, heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        self.k = torch.empty(batch, heads, max_len, head_dim, dtype=dtype, device=device)
        self.v = torch.empty_like(self.k)
        self.length = 0  # slots filled so far

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k, v (B, heads, T, hd)`` after the past; return all keys/values ``(B, heads, S, hd)``."""
        end = self.length + k.shape[2]
        if end > self.k.shape[2]:
            raise ValueError(f"KV cache holds {self.k.shape[2]} positions; {end} requested")
        self.k[:, :, self.length:end] = k
        self.v[:, :, self.length:end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index (B',)`` (beam search: each surviving beam's parent)."""
        self.k = self.k.index_select(0, index)
        self.v = self.v.index_select(0, index)


class KVCache:
    """The caches of all layers, plus the key padding mask and next positions.

    Args:
        batch: rows decoded together (prompts × beams).
        num_layers, num_heads, head_dim: the model's attention shape.
        max_len: longest total length (prompt + new tokens) this cache can hold.
    """

    def __init__(self, batch: int, num_layers: int, num_heads: int, head_dim: int, max_len: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> None:
        device = torch.device(device)
        self.layers = [LayerCache(batch, num_heads, max_len, head_dim, dtype, device)
                       for _ in range(num_layers)]
        self.key_mask = torch.zeros(batch, max_len, dtype=torch.bool, device=device)  # True = real token
        self.next_position = torch.zeros(batch, dtype=torch.long, device=device)  # (B,)
        self.length = 0
        self.padded = False  # any padding slot so far (else masks can be skipped)

    def advance(self, attention_mask: torch.Tensor | None, T: int = 1) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Register ``T`` new tokens (``attention_mask (B, T)`` bool, None = all real) before a
        forward pass.

        Returns their position ids ``(B, T)`` (counting real tokens only, as for an unpadded
        prompt) and the attention mask ``(B, 1, T, S)`` over all ``S`` keys — causal among the
        new tokens, padding slots hidden — or None when no row has padding and ``T == 1``.
        """
        if attention_mask is None and T == 1 and not self.padded:  # a decoding step: 3 small ops
            if self.length + 1 > self.key_mask.shape[1]:
                raise ValueError(f"KV cache holds {self.key_mask.shape[1]} positions; {self.length + 1} requested")
            self.key_mask[:, self.length] = True
            self.length += 1
            positions = self.next_position[:, None].clone()  # (B, 1)
            self.next_position += 1
            return positions, None
        if attention_mask is None:
            attention_mask = torch.ones(self.key_mask.shape[0], T, dtype=torch.bool, device=self.key_mask.device)
        B, T = attention_mask.shape
        start, end = self.length, self.length + T
        self.key_mask[:, start:end] = attention_mask
        self.padded = self.padded or not bool(attention_mask.all())
        positions = self.next_position[:, None] + attention_mask.long().cumsum(1) - 1  # (B, T)
        positions = positions.clamp_(min=0)
        self.next_position += attention_mask.long().sum(1)
        self.length = end
        if T == 1 and not self.padded:
            return positions, None
        causal = torch.ones(T, end, dtype=torch.bool, device=attention_mask.device).tril(start)  # (T, S)
        mask = causal[None] & self.key_mask[:, None, :end]  # (B, T, S)
        mask |= ~mask.any(-1, keepdim=True)  # a padding query row attends everywhere (output unused; no NaN)
        return positions, mask[:, None]  # (B, 1, T, S)

    def claim(self) -> int:
        """A decoding step of one new token per row by a kernel that writes the keys, values, key
        mask slot and next positions itself (:class:`~muppets.nn.decode_native.GPTStep`): check
        there is room and count the slot in every layer. Returns the new length."""
        end = self.length + 1
        if end > self.key_mask.shape[1]:
            raise ValueError(f"KV cache holds {self.key_mask.shape[1]} positions; {end} requested")
        self.length = end
        for layer in self.layers:
            layer.length = end
        return end

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index (B',)`` in every layer (beam search)."""
        for layer in self.layers:
            layer.reorder(index)
        self.key_mask = self.key_mask.index_select(0, index)
        self.next_position = self.next_position.index_select(0, index)
