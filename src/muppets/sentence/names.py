"""The pooling modes' names, ours and sentence-transformers' (no torch: the CLI's option lists and
the server's config read them without loading a model)."""

from __future__ import annotations

__all__ = ["ST_NAMES", "MODES", "LEGACY_KEYS"]

ST_NAMES = {"cls": "cls", "max": "max", "mean": "mean", "mean_sqrt_len": "mean_sqrt_len_tokens",
            "weighted_mean": "weightedmean", "last": "lasttoken"}
MODES = tuple(ST_NAMES)
LEGACY_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
               "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
               "pooling_mode_weightedmean_tokens": "weighted_mean", "pooling_mode_lasttoken": "last"}
