"""BERT (Devlin et al. 2019), and muppets' pre-LN variant: the reference encoder family.

Names and config are :mod:`muppets.interop.hf_bert`'s; WordPiece tokenizer
(:class:`~muppets.tokenizers.wordpiece.WordPieceTokenizer`); segment ids A/B.
"""

from __future__ import annotations

from muppets.families.encoder import encoder_family
from muppets.families.registry import register
from muppets.interop.hf_bert import BERT_FORMAT, PRE_LN_MODEL_TYPE
from muppets.tokenizers.wordpiece import WordPieceTokenizer

FAMILY = register(encoder_family(
    "bert", ("bert", PRE_LN_MODEL_TYPE), BERT_FORMAT, WordPieceTokenizer.load, token_types=True,
    description="BERT (post-LN, and muppets' pre-LN variant): WordPiece, segments A/B, MLM + NSP"))
