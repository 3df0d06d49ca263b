"""Tokenizers: text → ids. ``wordpiece`` is BERT's WordPiece (built on HF ``tokenizers``)."""

from muppets.tokenizers.wordpiece import WordPieceSettings, WordPieceTokenizer

__all__ = ["WordPieceSettings", "WordPieceTokenizer"]
