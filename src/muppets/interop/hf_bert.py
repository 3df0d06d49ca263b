"""Hugging Face BERT directories <-> muppets ``BertForPreTraining``.

An explicit key map with shape checks (STYLE.md: our own names, explicit converters). We write
``config.json`` + ``model.safetensors`` (+ tokenizer files) that
``transformers.BertForPreTraining.from_pretrained`` loads with no missing or unexpected keys,
and we read HF BERT directories — full pretraining checkpoints (``bert.`` prefix, ``cls.``
heads) and bare ``BertModel`` ones such as all-MiniLM-L6-v2 (no prefix, no heads).
"""

from __future__ import annotations

import dataclasses

import logging
from pathlib import Path

import torch

from muppets.config import write_json_atomic
from muppets.errors import CheckpointError
from muppets.interop.safetensors_io import read_json_object, read_weights, write_weights
from muppets.models.bert import BertConfig, BertForPreTraining

log = logging.getLogger(__name__)

_CONFIG_MAP = {  # ours -> HF config.json
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "hidden_dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
    "layer_norm_eps": "layer_norm_eps",
    "initializer_range": "initializer_range",
    "pad_token_id": "pad_token_id",
    "hidden_act": "hidden_act",
}
# A pre-LN BERT (``norm_first``) has no transformers class: its config.json names this model
# type and architecture, so transformers' Auto classes refuse it. ``BertModel.from_pretrained``
# still loads it (warning about the type and the unused ``final_layer_norm``) and would run it
# as post-LN: load it with muppets.
PRE_LN_MODEL_TYPE = "muppets-bert-preln"
_IGNORED_HF_KEYS = ("position_ids", "token_type_ids", "cls.predictions.decoder.")


def config_to_hf(cfg: BertConfig) -> dict:
    """Our config as an HF ``config.json`` dict."""
    out = {hf: getattr(cfg, ours) for ours, hf in _CONFIG_MAP.items()}
    out.update(model_type="bert", architectures=["BertForPreTraining"],
               position_embedding_type="absolute", tie_word_embeddings=cfg.tie_word_embeddings)
    if cfg.norm_first:
        out.update(model_type=PRE_LN_MODEL_TYPE, architectures=["MuppetsPreLNBertForPreTraining"], norm_first=True)
    return out


def config_from_hf(data: dict, source: str = "config.json") -> BertConfig:
    """An HF BERT ``config.json`` dict as our :class:`BertConfig`."""
    model_type = data.get("model_type", "bert")
    if model_type not in ("bert", PRE_LN_MODEL_TYPE):
        raise CheckpointError(f"{source}: model_type {model_type!r} is not 'bert'")
    if data.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{source}: position_embedding_type "
                              f"{data['position_embedding_type']!r} is not supported (only 'absolute')")
    missing = [hf for hf in _CONFIG_MAP.values() if hf not in data and hf != "pad_token_id"]
    if missing:
        raise CheckpointError(f"{source}: missing keys {missing}")
    kwargs = {ours: data[hf] for ours, hf in _CONFIG_MAP.items() if hf in data}
    return BertConfig(**kwargs, norm_first=model_type == PRE_LN_MODEL_TYPE,
                      tie_word_embeddings=bool(data.get("tie_word_embeddings", True)))


def _layer_map(i: int) -> dict[str, str]:
    ours, hf = f"backbone.layers.{i}.", f"bert.encoder.layer.{i}."
    return {
        ours + "attn.out": hf + "attention.output.dense",
        ours + "attn_norm": hf + "attention.output.LayerNorm",
        ours + "ffn.up": hf + "intermediate.dense",
        ours + "ffn.down": hf + "output.dense",
        ours + "ffn_norm": hf + "output.LayerNorm",
    }


# Module prefixes (each with .weight and .bias) of the pretraining heads: ours -> HF.
PRETRAINING_HEADS = {
    "pooler.dense": "bert.pooler.dense",
    "mlm.dense": "cls.predictions.transform.dense",
    "mlm.norm": "cls.predictions.transform.LayerNorm",
    "nsp": "cls.seq_relationship",
}
PRETRAINING_PARAMS = {"mlm.bias": "cls.predictions.bias"}
UNTIED_DECODER = {"mlm.decoder.weight": "cls.predictions.decoder.weight"}  # with tie_word_embeddings false


def backbone_param_map(cfg: BertConfig) -> dict[str, str]:
    """Every backbone parameter except the fused QKV: our name -> HF name."""
    out = {
        "backbone.embeddings.tokens.weight": "bert.embeddings.word_embeddings.weight",
        "backbone.embeddings.positions.weight": "bert.embeddings.position_embeddings.weight",
        "backbone.embeddings.segments.weight": "bert.embeddings.token_type_embeddings.weight",
    }
    modules = {"backbone.embeddings.norm": "bert.embeddings.LayerNorm"}
    for i in range(cfg.num_layers):
        modules.update(_layer_map(i))
    if cfg.norm_first:
        modules["backbone.final_norm"] = "bert.encoder.final_layer_norm"
    return {**out, **_expand(modules)}


def _expand(modules: dict[str, str]) -> dict[str, str]:
    return {f"{ours}.{p}": f"{hf}.{p}" for ours, hf in modules.items() for p in ("weight", "bias")}


def _param_map(cfg: BertConfig, heads: dict[str, str], params: dict[str, str]) -> dict[str, str]:
    untied = UNTIED_DECODER if not cfg.tie_word_embeddings and "mlm.bias" in params else {}
    return {**backbone_param_map(cfg), **_expand(heads), **params, **untied}


def _qkv_names(cfg: BertConfig) -> dict[str, list[str]]:
    """Our fused QKV parameter -> the three HF query/key/value names it concatenates."""
    out = {}
    for i in range(cfg.num_layers):
        p = f"bert.encoder.layer.{i}.attention.self."
        for kind in ("weight", "bias"):
            out[f"backbone.layers.{i}.attn.qkv.{kind}"] = [p + f"{n}.{kind}" for n in ("query", "key", "value")]
    return out


def to_hf_state(model: torch.nn.Module, cfg: BertConfig | None = None,
                heads: dict[str, str] = PRETRAINING_HEADS,
                params: dict[str, str] = PRETRAINING_PARAMS) -> dict[str, torch.Tensor]:
    """Our state dict under HF names; the fused QKV is split into query/key/value."""
    cfg = cfg or model.cfg
    ours = model.state_dict()
    out = {hf: ours[name] for name, hf in _param_map(cfg, heads, params).items()}
    if "cls.predictions.decoder.weight" in out:  # untied: transformers also reads the decoder's bias there
        out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"].clone()
    for name, (q, k, v) in _qkv_names(cfg).items():
        out[q], out[k], out[v] = ours[name].chunk(3, dim=0)
    return out


def from_hf_state(hf: dict[str, torch.Tensor], cfg: BertConfig, source: str,
                  heads: dict[str, str] = PRETRAINING_HEADS,
                  params: dict[str, str] = PRETRAINING_PARAMS) -> tuple[dict, list[str]]:
    """HF tensors -> our state dict. Returns (state, our keys that the file did not have).

    File keys we have no place for are an error when they belong to the encoder (a different
    architecture) and are logged otherwise (e.g. the pretraining heads when loading a backbone).
    """
    hf = _with_bert_prefix(hf)
    mapping = _param_map(cfg, heads, params)
    state = {name: hf[h] for name, h in mapping.items() if h in hf}
    absent = [name for name, h in mapping.items() if h not in hf]
    for name, parts in _qkv_names(cfg).items():
        if all(p in hf for p in parts):
            state[name] = torch.cat([hf[p] for p in parts], dim=0)
        else:
            absent.append(name)
    used = set(mapping.values()) | {p for parts in _qkv_names(cfg).values() for p in parts}
    unused = [k for k in hf if k not in used and not any(s in k for s in _IGNORED_HF_KEYS)]
    foreign = [k for k in unused if k.startswith(("bert.embeddings.", "bert.encoder."))]
    if foreign:
        raise CheckpointError(f"{source}: unexpected weights {foreign[:5]} (+{max(0, len(foreign) - 5)} more)")
    if unused:
        log.info("%s: weights not used: %s", source, unused)
    return state, absent


def _with_bert_prefix(hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Bare ``BertModel`` checkpoints name ``embeddings.…``; full ones ``bert.embeddings.…``."""
    bare = ("embeddings.", "encoder.", "pooler.")
    return {("bert." + k if k.startswith(bare) else k): v for k, v in hf.items()}


def save_hf_bert(model: BertForPreTraining, directory: str | Path, tokenizer=None,
                 dropout: tuple[float, float] | None = None) -> Path:
    """Write an HF directory: config.json, model.safetensors and (given one) the tokenizer.
    ``dropout``: the (hidden, attention) dropout config.json states, when the model was trained
    with other rates than its users should fine-tune with (default: the model's own)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cfg = model.cfg if dropout is None else dataclasses.replace(model.cfg, hidden_dropout=dropout[0],
                                                                attention_dropout=dropout[1])
    write_weights(to_hf_state(model), directory / "model.safetensors", metadata={"format": "pt"})
    write_json_atomic(directory / "config.json", config_to_hf(cfg))
    if tokenizer is not None:
        tokenizer.save(directory)
    return directory


LOADED_OVERRIDES = ("hidden_dropout", "attention_dropout", "tie_word_embeddings")  # shape-preserving config fields


def load_hf_bert(directory: str | Path, **config_overrides) -> BertForPreTraining:
    """Load an HF BERT directory. Backbone weights must all be present; missing heads (e.g. a
    bare ``BertModel``) keep their fresh initialisation and are logged. ``config_overrides``:
    fields of :data:`LOADED_OVERRIDES` (by our names) that replace config.json's."""
    directory = Path(directory)
    cfg_path = directory / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{directory}: no config.json (is this a Hugging Face model directory?)")
    weights = read_weights(directory)
    data = read_json_object(cfg_path)
    unknown = sorted(set(config_overrides) - set(LOADED_OVERRIDES))
    if unknown:
        raise CheckpointError(f"{directory}: cannot override {unknown} of a saved model (only {list(LOADED_OVERRIDES)})")
    cfg = dataclasses.replace(config_from_hf(data, str(cfg_path)), **config_overrides)
    model = BertForPreTraining(cfg)
    decoder = weights.get("cls.predictions.decoder.weight")
    embeddings = _with_bert_prefix(weights).get("bert.embeddings.word_embeddings.weight")
    if cfg.tie_word_embeddings and decoder is not None and embeddings is not None and not torch.equal(decoder, embeddings):
        log.warning("%s: its MLM decoder differs from its word embeddings, and tie_word_embeddings is true here: "
                    "the decoder is dropped and the word embeddings decode", directory)
    state, absent = from_hf_state(weights, cfg, str(directory))
    for name, tensor in state.items():
        _check_shape(model, name, tensor, directory)
    missing_backbone = [k for k in absent if k.startswith("backbone.")]
    if missing_backbone:
        raise CheckpointError(f"{directory}: missing backbone weights {missing_backbone[:5]}")
    if "mlm.decoder.weight" in absent:  # an untied head over a tied checkpoint: start where tying was
        state["mlm.decoder.weight"] = state["backbone.embeddings.tokens.weight"].clone()
        absent.remove("mlm.decoder.weight")
        log.info("%s: tie_word_embeddings=false over a tied checkpoint: the MLM decoder starts as a copy "
                 "of the word embeddings", directory)
    if absent:
        log.info("%s: no weights for %s; they keep their initialisation", directory, sorted(absent))
    model.load_state_dict(state, strict=False)
    return model


def _check_shape(model: torch.nn.Module, name: str, tensor: torch.Tensor, source: Path) -> None:
    expected = model.state_dict()[name].shape
    if tensor.shape != expected:
        raise CheckpointError(f"{source}: {name} has shape {tuple(tensor.shape)}, config implies {tuple(expected)}")
