"""The one contract between backbones and everything that consumes them
(docs/concepts/architecture.md, "The Encoded contract")."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Encoded:
    """What every backbone returns.

    Attributes:
        layers: ``L + 1`` tensors of shape ``(B, T, H)``: the embedding output first, the top
            layer last.
        mask: ``(B, T)`` bool, True where there is a real token (not padding).
    """

    layers: list[torch.Tensor]
    mask: torch.Tensor

    @property
    def last(self) -> torch.Tensor:
        """The top layer, ``(B, T, H)``."""
        return self.layers[-1]
