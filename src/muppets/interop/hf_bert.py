"""Hugging Face BERT directories <-> muppets ``BertForPreTraining``.

An explicit key map with shape checks (STYLE.md: our own names, explicit converters). We write
``config.json`` + ``model.safetensors`` (+ tokenizer files) that
``transformers.BertForPreTraining.from_pretrained`` loads with no missing or unexpected keys,
and we read HF BERT directories — full pretraining checkpoints (``bert.`` prefix, ``cls.``
heads) and bare ``BertModel`` ones such as all-MiniLM-L6-v2 (no prefix, no heads).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from muppets.config import write_json_atomic
from muppets.errors import CheckpointError
from muppets.interop.safetensors_io import read_weights, write_weights
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
_IGNORED_HF_KEYS = ("position_ids", "token_type_ids", "cls.predictions.decoder.")


def config_to_hf(cfg: BertConfig) -> dict:
    """Our config as an HF ``config.json`` dict."""
    out = {hf: getattr(cfg, ours) for ours, hf in _CONFIG_MAP.items()}
    out.update(model_type="bert", architectures=["BertForPreTraining"],
               position_embedding_type="absolute", tie_word_embeddings=True)
    return out


def config_from_hf(data: dict, source: str = "config.json") -> BertConfig:
    """An HF BERT ``config.json`` dict as our :class:`BertConfig`."""
    if data.get("model_type", "bert") != "bert":
        raise CheckpointError(f"{source}: model_type {data.get('model_type')!r} is not 'bert'")
    if data.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{source}: position_embedding_type "
                              f"{data['position_embedding_type']!r} is not supported (only 'absolute')")
    missing = [hf for hf in _CONFIG_MAP.values() if hf not in data and hf != "pad_token_id"]
    if missing:
        raise CheckpointError(f"{source}: missing keys {missing}")
    kwargs = {ours: data[hf] for ours, hf in _CONFIG_MAP.items() if hf in data}
    return BertConfig(**kwargs)


def _layer_map(i: int) -> dict[str, str]:
    ours, hf = f"backbone.layers.{i}.", f"bert.encoder.layer.{i}."
    return {
        ours + "attn.out": hf + "attention.output.dense",
        ours + "attn_norm": hf + "attention.output.LayerNorm",
        ours + "ffn.up": hf + "intermediate.dense",
        ours + "ffn.down": hf + "output.dense",
        ours + "ffn_norm": hf + "output.LayerNorm",
    }


def module_map(cfg: BertConfig) -> dict[str, str]:
    """Our module prefixes -> HF module prefixes (each with ``.weight`` / ``.bias``)."""
    out = {
        "backbone.embeddings.norm": "bert.embeddings.LayerNorm",
        "pooler.dense": "bert.pooler.dense",
        "mlm.dense": "cls.predictions.transform.dense",
        "mlm.norm": "cls.predictions.transform.LayerNorm",
        "nsp": "cls.seq_relationship",
    }
    for i in range(cfg.num_layers):
        out.update(_layer_map(i))
    return out


def _param_map(cfg: BertConfig) -> dict[str, str]:
    """Every non-QKV parameter: our name -> HF name."""
    out = {
        "backbone.embeddings.tokens.weight": "bert.embeddings.word_embeddings.weight",
        "backbone.embeddings.positions.weight": "bert.embeddings.position_embeddings.weight",
        "backbone.embeddings.segments.weight": "bert.embeddings.token_type_embeddings.weight",
        "mlm.bias": "cls.predictions.bias",
    }
    for ours, hf in module_map(cfg).items():
        out[ours + ".weight"], out[ours + ".bias"] = hf + ".weight", hf + ".bias"
    return out


def to_hf_state(model: BertForPreTraining) -> dict[str, torch.Tensor]:
    """Our state dict under HF names; the fused QKV is split into query/key/value."""
    ours = model.state_dict()
    out = {hf: ours[name] for name, hf in _param_map(model.cfg).items()}
    for i in range(model.cfg.num_layers):
        hf = f"bert.encoder.layer.{i}.attention.self."
        for kind in ("weight", "bias"):
            q, k, v = ours[f"backbone.layers.{i}.attn.qkv.{kind}"].chunk(3, dim=0)
            out[hf + f"query.{kind}"], out[hf + f"key.{kind}"], out[hf + f"value.{kind}"] = q, k, v
    return out


def from_hf_state(hf: dict[str, torch.Tensor], cfg: BertConfig, source: str) -> tuple[dict, list[str]]:
    """HF tensors -> our state dict. Returns (state, our keys that the file did not have)."""
    hf = _with_bert_prefix(hf)
    state, absent = {}, []
    for name, hf_name in _param_map(cfg).items():
        if hf_name in hf:
            state[name] = hf[hf_name]
        else:
            absent.append(name)
    for i in range(cfg.num_layers):
        p = f"bert.encoder.layer.{i}.attention.self."
        for kind in ("weight", "bias"):
            parts = [hf.get(p + f"{n}.{kind}") for n in ("query", "key", "value")]
            if any(t is None for t in parts):
                absent.append(f"backbone.layers.{i}.attn.qkv.{kind}")
            else:
                state[f"backbone.layers.{i}.attn.qkv.{kind}"] = torch.cat(parts, dim=0)
    used = set(_param_map(cfg).values()) | {f"bert.encoder.layer.{i}.attention.self.{n}.{k}"
                                            for i in range(cfg.num_layers)
                                            for n in ("query", "key", "value") for k in ("weight", "bias")}
    unexpected = [k for k in hf if k not in used and not any(s in k for s in _IGNORED_HF_KEYS)]
    if unexpected:
        raise CheckpointError(f"{source}: unexpected weights {unexpected[:5]} (+{max(0, len(unexpected) - 5)} more)")
    return state, absent


def _with_bert_prefix(hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Bare ``BertModel`` checkpoints name ``embeddings.…``; full ones ``bert.embeddings.…``."""
    return {(k if k.startswith(("bert.", "cls.")) else "bert." + k): v for k, v in hf.items()}


def save_hf_bert(model: BertForPreTraining, directory: str | Path, tokenizer=None) -> Path:
    """Write an HF directory: config.json, model.safetensors and (given one) the tokenizer."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_weights(to_hf_state(model), directory / "model.safetensors", metadata={"format": "pt"})
    write_json_atomic(directory / "config.json", config_to_hf(model.cfg))
    if tokenizer is not None:
        tokenizer.save(directory)
    return directory


def load_hf_bert(directory: str | Path, **config_overrides) -> BertForPreTraining:
    """Load an HF BERT directory. Backbone weights must all be present; missing heads (e.g. a
    bare ``BertModel``) keep their fresh initialisation and are logged."""
    directory = Path(directory)
    cfg_path = directory / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{directory}: no config.json (is this a Hugging Face model directory?)")
    weights = read_weights(directory)
    data = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg = config_from_hf({**data, **{_CONFIG_MAP[k]: v for k, v in config_overrides.items()}}, str(cfg_path))
    model = BertForPreTraining(cfg)
    state, absent = from_hf_state(weights, cfg, str(directory))
    for name, tensor in state.items():
        _check_shape(model, name, tensor, directory)
    missing_backbone = [k for k in absent if k.startswith("backbone.")]
    if missing_backbone:
        raise CheckpointError(f"{directory}: missing backbone weights {missing_backbone[:5]}")
    if absent:
        log.info("%s: no weights for %s; they keep their initialisation", directory, sorted(absent))
    model.load_state_dict(state, strict=False)
    return model


def _check_shape(model: torch.nn.Module, name: str, tensor: torch.Tensor, source: Path) -> None:
    expected = model.state_dict()[name].shape
    if tensor.shape != expected:
        raise CheckpointError(f"{source}: {name} has shape {tuple(tensor.shape)}, config implies {tuple(expected)}")
