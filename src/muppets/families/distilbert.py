"""DistilBERT (Sanh et al. 2019): a 6-layer BERT distilled from BERT-base — the same post-LN
blocks under other names, with no token types and no pooler.

Real differences: ``type_vocab_size`` 0 (no segment table: pair inputs are told apart by
``[SEP]`` alone), its own key names (``transformer.layer.i.attention.q_lin`` …,
``vocab_transform / vocab_layer_norm / vocab_projector``), and the sentence head of transformers'
``DistilBertForSequenceClassification`` (``pre_classifier`` + ReLU: our pooler with ``relu``).
Sinusoidal position tables (``sinusoidal_pos_embds``) are stored in the weights and read as they
are (training would then move them, where transformers keeps them frozen).
"""

from __future__ import annotations

import logging

from muppets.errors import CheckpointError
from muppets.families.encoder import encoder_family
from muppets.families.registry import register
from muppets.interop.hf_bert import BERT_EMBEDDINGS, EncoderFormat, bert_like_config, task_heads
from muppets.models.bert import BertConfig
from muppets.tokenizers.wordpiece import WordPieceTokenizer

log = logging.getLogger(__name__)

CONFIG_MAP = {  # ours -> DistilBERT's config.json
    "vocab_size": "vocab_size", "hidden_size": "dim", "num_layers": "n_layers", "num_heads": "n_heads",
    "intermediate_size": "hidden_dim", "max_position_embeddings": "max_position_embeddings",
    "hidden_dropout": "dropout", "attention_dropout": "attention_dropout",
    "initializer_range": "initializer_range", "pad_token_id": "pad_token_id", "hidden_act": "activation",
}


def config_from_hf(data: dict, source: str = "config.json") -> BertConfig:
    """A DistilBERT ``config.json`` dict as our :class:`BertConfig` (LayerNorm eps 1e-12, as its code fixes it)."""
    if data.get("model_type") != "distilbert":
        raise CheckpointError(f"{source}: key 'model_type' is {data.get('model_type')!r}, not 'distilbert'")
    if data.get("sinusoidal_pos_embds"):
        log.info("%s: sinusoidal position embeddings are read as stored and train like learned ones", source)
    return BertConfig(**bert_like_config(data, source, CONFIG_MAP), type_vocab_size=0, layer_norm_eps=1e-12,
                      model_type="distilbert", tie_word_embeddings=bool(data.get("tie_word_embeddings", True)))


def config_to_hf(cfg: BertConfig) -> dict:
    out = {hf: getattr(cfg, ours) for ours, hf in CONFIG_MAP.items()}
    out.update(model_type="distilbert", architectures=["DistilBertForMaskedLM"], sinusoidal_pos_embds=False,
               tie_word_embeddings=cfg.tie_word_embeddings)
    return out


FORMAT = EncoderFormat(
    prefix="distilbert.", embeddings=BERT_EMBEDDINGS, layer="transformer.layer.{i}.",
    layer_modules={"attn.out": "attention.out_lin", "attn_norm": "sa_layer_norm", "ffn.up": "ffn.lin1",
                   "ffn.down": "ffn.lin2", "ffn_norm": "output_layer_norm"},
    qkv=("attention.q_lin", "attention.k_lin", "attention.v_lin"),
    heads={"mlm.dense": "vocab_transform", "mlm.norm": "vocab_layer_norm"},
    params={"mlm.bias": "vocab_projector.bias"}, decoder=("vocab_projector.weight", None),
    ignored=("position_ids", "vocab_projector.weight"),
    tasks=task_heads("DistilBert", {"head.vector.pooler.dense": "pre_classifier", "head.classifier": "classifier"}),
    to_config=config_to_hf, from_config=config_from_hf, pooler_act="relu")

FAMILY = register(encoder_family(
    "distilbert", ("distilbert",), FORMAT, WordPieceTokenizer.load, token_types=False,
    description="DistilBERT: WordPiece, no token types, no pooler, MLM"))
