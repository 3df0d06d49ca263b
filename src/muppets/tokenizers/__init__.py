"""Tokenizers: text → ids, built on HF ``tokenizers``. ``wordpiece`` is BERT's WordPiece;
``bpe`` is GPT-2's byte-level BPE."""

from muppets.tokenizers.bpe import ByteLevelBPESettings, ByteLevelBPETokenizer
from muppets.tokenizers.wordpiece import WordPieceSettings, WordPieceTokenizer

__all__ = ["ByteLevelBPESettings", "ByteLevelBPETokenizer", "WordPieceSettings", "WordPieceTokenizer"]
