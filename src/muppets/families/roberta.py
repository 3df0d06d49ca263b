"""RoBERTa (Liu et al. 2019), XLM-RoBERTa (Conneau et al. 2020) and CamemBERT: BERT's encoder
with three real differences, nothing else.

* positions count the real tokens from ``pad_token_id + 1`` (fairseq's ``make_positions``):
  :attr:`BertConfig.padded_positions`; the position table has ``pad_token_id + 1`` more rows;
* one token type (``type_vocab_size`` 1): every segment reads as type 0;
* the MLM head is ``lm_head.dense / layer_norm / decoder`` with an exact-GELU transform.

The three model types share every weight name (``roberta.`` prefix), so one module reads them;
XLM-R and CamemBERT differ in their tokenizer (SentencePiece Unigram / BPE) only, which
:class:`~muppets.tokenizers.hf_json.JsonTokenizer` reads from ``tokenizer.json``. The model type
is kept, so a saved directory is what it was.
"""

from __future__ import annotations

from muppets.errors import CheckpointError
from muppets.families.encoder import encoder_family
from muppets.families.registry import register
from muppets.interop.hf_bert import (BERT_EMBEDDINGS, BERT_LAYER, BERT_QKV, CONFIG_MAP, EncoderFormat,
                                     bert_like_config, task_heads)
from muppets.models.bert import BertConfig
from muppets.tokenizers.hf_json import JsonTokenizer

MODEL_TYPES = ("roberta", "xlm-roberta", "camembert")
_ARCH = {"roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert"}


def config_from_hf(data: dict, source: str = "config.json") -> BertConfig:
    """A RoBERTa-family ``config.json`` dict as our :class:`BertConfig`."""
    model_type = data.get("model_type")
    if model_type not in MODEL_TYPES:
        raise CheckpointError(f"{source}: key 'model_type' is {model_type!r}, not one of {list(MODEL_TYPES)}")
    if data.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{source}: key 'position_embedding_type' is "
                              f"{data['position_embedding_type']!r}; only 'absolute' is supported")
    return BertConfig(**bert_like_config(data, source), padded_positions=True, mlm_act="gelu",
                      model_type=model_type, tie_word_embeddings=bool(data.get("tie_word_embeddings", True)))


def config_to_hf(cfg: BertConfig) -> dict:
    """Our config as a RoBERTa-family ``config.json`` (its model type kept)."""
    out = {hf: getattr(cfg, ours) for ours, hf in CONFIG_MAP.items()}
    model_type = cfg.model_type if cfg.model_type in MODEL_TYPES else "roberta"
    out.update(model_type=model_type, architectures=[f"{_ARCH[model_type]}ForMaskedLM"],
               position_embedding_type="absolute", tie_word_embeddings=cfg.tie_word_embeddings)
    return out


FORMAT = EncoderFormat(
    prefix="roberta.", embeddings=BERT_EMBEDDINGS, layer="encoder.layer.{i}.", layer_modules=BERT_LAYER,
    qkv=BERT_QKV,
    heads={"pooler.dense": "roberta.pooler.dense", "mlm.dense": "lm_head.dense", "mlm.norm": "lm_head.layer_norm"},
    params={"mlm.bias": "lm_head.bias"}, decoder=("lm_head.decoder.weight", "lm_head.decoder.bias"),
    ignored=("position_ids", "token_type_ids", "lm_head.decoder."),
    # RobertaClassificationHead: dense + tanh + out_proj on <s> (our pooler + classifier)
    tasks=task_heads("Roberta", {"head.vector.pooler.dense": "classifier.dense", "head.classifier": "classifier.out_proj"},
                     {"head.vector.pooler.dense": "roberta.pooler.dense", "head.classifier": "classifier"}),
    to_config=config_to_hf, from_config=config_from_hf)

FAMILY = register(encoder_family(
    "roberta", MODEL_TYPES, FORMAT, JsonTokenizer.load, token_types=False,
    description="RoBERTa / XLM-R / CamemBERT: any tokenizer.json, positions from pad+1, one token type, MLM"))
