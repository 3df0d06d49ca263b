"""ELECTRA (Clark et al. 2020): a BERT encoder whose embeddings may be narrower than its blocks.

Real differences: ``embedding_size`` E ≠ H (the small models) adds ``embeddings_project``, a
linear layer lifting E to H before the first block (:attr:`BertConfig.embedding_size`); the
generator's MLM head maps H down to E and decodes with the (V, E) word embeddings
(``generator_predictions`` + ``generator_lm_head``); sentence heads read ``gelu(W h_[CLS])``.

Both checkpoints read: a generator (``ElectraForMaskedLM``) with its MLM head, and a
discriminator (``ElectraForPreTraining``) as an encoder — its replaced-token-detection head
(``discriminator_predictions``) is not run by muppets and is left out (logged), so fill-mask is
refused for it and a re-saved discriminator is written as an encoder with a fresh MLM head.
"""

from __future__ import annotations

from muppets.errors import CheckpointError
from muppets.families.encoder import encoder_family
from muppets.families.registry import register
from muppets.interop.hf_bert import (BERT_EMBEDDINGS, BERT_LAYER, BERT_QKV, CONFIG_MAP, EncoderFormat,
                                     bert_like_config, task_heads)
from muppets.models.bert import BertConfig
from muppets.tokenizers.wordpiece import WordPieceTokenizer


def config_from_hf(data: dict, source: str = "config.json") -> BertConfig:
    """An ELECTRA ``config.json`` dict as our :class:`BertConfig`."""
    if data.get("model_type") != "electra":
        raise CheckpointError(f"{source}: key 'model_type' is {data.get('model_type')!r}, not 'electra'")
    if data.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{source}: key 'position_embedding_type' is "
                              f"{data['position_embedding_type']!r}; only 'absolute' is supported")
    kwargs = bert_like_config(data, source)
    embedding = data.get("embedding_size", kwargs["hidden_size"])
    if not isinstance(embedding, int) or embedding < 1:
        raise CheckpointError(f"{source}: key 'embedding_size' must be a positive integer, not {embedding!r}")
    return BertConfig(**kwargs, embedding_size=0 if embedding == kwargs["hidden_size"] else embedding,
                      mlm_act="gelu", model_type="electra", tie_word_embeddings=bool(data.get("tie_word_embeddings", True)))


def config_to_hf(cfg: BertConfig) -> dict:
    out = {hf: getattr(cfg, ours) for ours, hf in CONFIG_MAP.items()}
    out.update(model_type="electra", architectures=["ElectraForMaskedLM"], embedding_size=cfg.embedding_width,
               position_embedding_type="absolute", tie_word_embeddings=cfg.tie_word_embeddings)
    return out


FORMAT = EncoderFormat(
    prefix="electra.",
    embeddings={**BERT_EMBEDDINGS, "project.weight": "embeddings_project.weight", "project.bias": "embeddings_project.bias"},
    layer="encoder.layer.{i}.", layer_modules=BERT_LAYER, qkv=BERT_QKV,
    heads={"mlm.dense": "generator_predictions.dense", "mlm.norm": "generator_predictions.LayerNorm"},
    params={"mlm.bias": "generator_lm_head.bias"}, decoder=("generator_lm_head.weight", None),
    ignored=("position_ids", "token_type_ids", "generator_lm_head.weight"),
    tasks=task_heads("Electra", {"head.vector.pooler.dense": "classifier.dense", "head.classifier": "classifier.out_proj"},
                     {"head.vector.pooler.dense": "sequence_summary.summary", "head.classifier": "classifier"}),
    to_config=config_to_hf, from_config=config_from_hf, pooler_act="gelu")

FAMILY = register(encoder_family(
    "electra", ("electra",), FORMAT, WordPieceTokenizer.load, token_types=True,
    description="ELECTRA generator / discriminator: WordPiece, embedding projection E -> H, MLM (generator)"))
