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
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import torch

from muppets.errors import CheckpointError
from muppets.interop.model_card import Provenance, write_config, write_model_card
from muppets.interop.safetensors_io import read_json_object, read_weights, write_weights
from muppets.models.bert import BertConfig, BertForPreTraining

log = logging.getLogger(__name__)

CONFIG_MAP = {  # ours -> HF config.json (BERT; RoBERTa and ELECTRA share it)
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


def config_to_hf(cfg: BertConfig) -> dict:
    """Our config as an HF ``config.json`` dict."""
    out = {hf: getattr(cfg, ours) for ours, hf in CONFIG_MAP.items()}
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
    return BertConfig(**bert_like_config(data, source), norm_first=model_type == PRE_LN_MODEL_TYPE,
                      tie_word_embeddings=bool(data.get("tie_word_embeddings", True)))


def bert_like_config(data: dict, source: str, config_map: dict[str, str] = CONFIG_MAP) -> dict:
    """Our config fields from a config.json that names them as ``config_map`` does (BERT's
    names by default; RoBERTa and ELECTRA use them too); every key but ``pad_token_id`` is needed."""
    missing = [hf for hf in config_map.values() if hf not in data and hf != "pad_token_id"]
    if missing:
        raise CheckpointError(f"{source}: missing keys {missing}")
    return {ours: data[hf] for ours, hf in config_map.items() if hf in data}


@dataclass(frozen=True)
class EncoderFormat:
    """How one encoder family lays out a Hugging Face checkpoint: every name, no numbers.

    BERT, RoBERTa, DistilBERT and ELECTRA share our backbone (:class:`BertBackbone`) and differ
    here in names only (and in the few :class:`BertConfig` flags their ``config_from_hf`` sets).
    Our names are those of :class:`BertForPreTraining`; HF names of the backbone are given
    after ``prefix`` (full checkpoints have it, bare ``AutoModel`` ones do not).
    """

    prefix: str  # base-model prefix of full checkpoints ("bert.")
    embeddings: dict[str, str]  # our backbone parameter -> HF name after the prefix
    layer: str  # HF name of block i after the prefix, with {i}
    layer_modules: dict[str, str]  # our block module -> HF module (each .weight and .bias)
    qkv: tuple[str, str, str]  # the HF query, key, value modules our fused qkv concatenates
    heads: dict[str, str]  # pretraining head modules: ours -> full HF name
    params: dict[str, str]  # pretraining head parameters: ours -> full HF name
    decoder: tuple[str, str | None]  # HF (weight, bias copy or None) of an untied MLM decoder
    ignored: tuple[str, ...]  # HF key parts never read (buffers, the tied decoder's copy)
    tasks: dict[str, tuple[dict[str, str], str]]  # task kind -> (head modules ours -> HF, architecture)
    to_config: Callable[[BertConfig], dict]  # our config -> config.json
    from_config: Callable[[dict, str], BertConfig]  # config.json (and its path, for errors) -> our config
    final_norm: str | None = None  # HF module of the pre-LN final LayerNorm (BERT only)
    pooler_act: str = "tanh"  # activation of the sentence vector its ForSequenceClassification head reads


def _modules(pairs: dict[str, str]) -> dict[str, str]:
    return {f"{ours}.{p}": f"{hf}.{p}" for ours, hf in pairs.items() for p in ("weight", "bias")}


BERT_LAYER = {"attn.out": "attention.output.dense", "attn_norm": "attention.output.LayerNorm",
              "ffn.up": "intermediate.dense", "ffn.down": "output.dense", "ffn_norm": "output.LayerNorm"}
BERT_EMBEDDINGS = {"embeddings.tokens.weight": "embeddings.word_embeddings.weight",
                   "embeddings.positions.weight": "embeddings.position_embeddings.weight",
                   "embeddings.segments.weight": "embeddings.token_type_embeddings.weight",
                   **_modules({"embeddings.norm": "embeddings.LayerNorm"})}
BERT_QKV = ("attention.self.query", "attention.self.key", "attention.self.value")

# Module prefixes (each with .weight and .bias) of the pretraining heads: ours -> HF.
PRETRAINING_HEADS = {
    "pooler.dense": "bert.pooler.dense",
    "mlm.dense": "cls.predictions.transform.dense",
    "mlm.norm": "cls.predictions.transform.LayerNorm",
    "nsp": "cls.seq_relationship",
}
PRETRAINING_PARAMS = {"mlm.bias": "cls.predictions.bias"}
UNTIED_DECODER = {"mlm.decoder.weight": "cls.predictions.decoder.weight"}  # with tie_word_embeddings false

_POOLED = {"head.vector.pooler.dense": "bert.pooler.dense", "head.classifier": "classifier"}
TASK_HEADS: dict[str, tuple[dict[str, str], str]] = {  # kind -> (head modules ours -> HF, architecture)
    "classify": (_POOLED, "BertForSequenceClassification"),
    "pair": (_POOLED, "BertForSequenceClassification"),
    "regress": (_POOLED, "BertForSequenceClassification"),
    "tag": ({"head.classifier": "classifier"}, "BertForTokenClassification"),
    "span": ({"head.qa_outputs": "qa_outputs"}, "BertForQuestionAnswering"),
    "choice": (_POOLED, "BertForMultipleChoice"),
}


def task_heads(arch: str, sentence: dict[str, str], choice: dict[str, str] | None = None) -> dict[str, tuple[dict[str, str], str]]:
    """A family's task-head table: its architecture prefix (``Roberta``), the head names of its
    sequence classifier (``sentence``) and of its multiple-choice model (default: the same);
    token classification and QA heads are named alike in every family."""
    seq = (sentence, f"{arch}ForSequenceClassification")
    return {"classify": seq, "pair": seq, "regress": seq,
            "tag": ({"head.classifier": "classifier"}, f"{arch}ForTokenClassification"),
            "span": ({"head.qa_outputs": "qa_outputs"}, f"{arch}ForQuestionAnswering"),
            "choice": (choice or sentence, f"{arch}ForMultipleChoice")}


BERT_FORMAT = EncoderFormat(
    prefix="bert.", embeddings=BERT_EMBEDDINGS, layer="encoder.layer.{i}.", layer_modules=BERT_LAYER,
    qkv=BERT_QKV, heads=PRETRAINING_HEADS, params=PRETRAINING_PARAMS, tasks=TASK_HEADS,
    decoder=("cls.predictions.decoder.weight", "cls.predictions.decoder.bias"),
    ignored=("position_ids", "token_type_ids", "cls.predictions.decoder."),
    to_config=config_to_hf, from_config=config_from_hf, final_norm="encoder.final_layer_norm")


def _present(cfg: BertConfig, ours: str) -> bool:
    """Whether our backbone built with ``cfg`` has the parameter ``ours`` (no segment table
    without token types, no projection unless the embeddings are narrower)."""
    if ours.startswith("embeddings.segments."):
        return cfg.type_vocab_size > 0
    if ours.startswith("project."):
        return cfg.embedding_size > 0
    return True


def backbone_param_map(cfg: BertConfig, fmt: EncoderFormat = BERT_FORMAT) -> dict[str, str]:
    """Every backbone parameter except the fused QKV: our name -> HF name."""
    modules = {}
    for i in range(cfg.num_layers):
        layer = fmt.layer.format(i=i)
        modules.update({f"layers.{i}.{ours}": layer + hf for ours, hf in fmt.layer_modules.items()})
    if cfg.norm_first:
        if fmt.final_norm is None:
            raise CheckpointError("a pre-LN encoder (norm_first) has Hugging Face names in the BERT format only")
        modules["final_norm"] = fmt.final_norm
    names = {**{k: v for k, v in fmt.embeddings.items() if _present(cfg, k)}, **_modules(modules)}
    return {"backbone." + ours: fmt.prefix + hf for ours, hf in names.items()}


def _param_map(cfg: BertConfig, heads: dict[str, str], params: dict[str, str],
               fmt: EncoderFormat) -> dict[str, str]:
    untied = {"mlm.decoder.weight": fmt.decoder[0]} if not cfg.tie_word_embeddings and "mlm.bias" in params else {}
    return {**backbone_param_map(cfg, fmt), **_modules(heads), **params, **untied}


def _qkv_names(cfg: BertConfig, fmt: EncoderFormat) -> dict[str, list[str]]:
    """Our fused QKV parameter -> the three HF query/key/value names it concatenates."""
    out = {}
    for i in range(cfg.num_layers):
        p = fmt.prefix + fmt.layer.format(i=i)
        for kind in ("weight", "bias"):
            out[f"backbone.layers.{i}.attn.qkv.{kind}"] = [f"{p}{n}.{kind}" for n in fmt.qkv]
    return out


def to_hf_state(model: torch.nn.Module, cfg: BertConfig | None = None,
                heads: dict[str, str] | None = None, params: dict[str, str] | None = None,
                fmt: EncoderFormat = BERT_FORMAT) -> dict[str, torch.Tensor]:
    """Our state dict under HF names; the fused QKV is split into query/key/value.
    ``heads`` / ``params``: the head names (default: the format's pretraining heads)."""
    cfg = cfg or model.cfg
    heads, params = fmt.heads if heads is None else heads, fmt.params if params is None else params
    ours = model.state_dict()
    out = {hf: ours[name] for name, hf in _param_map(cfg, heads, params, fmt).items()}
    weight, bias = fmt.decoder
    if weight in out and bias is not None:  # untied: transformers also reads the decoder's bias there
        out[bias] = out[params["mlm.bias"]].clone()
    for name, (q, k, v) in _qkv_names(cfg, fmt).items():
        out[q], out[k], out[v] = ours[name].chunk(3, dim=0)
    return out


def from_hf_state(hf: dict[str, torch.Tensor], cfg: BertConfig, source: str,
                  heads: dict[str, str] | None = None, params: dict[str, str] | None = None,
                  fmt: EncoderFormat = BERT_FORMAT) -> tuple[dict, list[str]]:
    """HF tensors -> our state dict. Returns (state, our keys that the file did not have).

    File keys we have no place for are an error when they belong to the encoder (a different
    architecture) and are logged otherwise (e.g. the pretraining heads when loading a backbone).
    """
    heads, params = fmt.heads if heads is None else heads, fmt.params if params is None else params
    hf = with_prefix(hf, fmt)
    mapping = _param_map(cfg, heads, params, fmt)
    state = {name: hf[h] for name, h in mapping.items() if h in hf}
    absent = [name for name, h in mapping.items() if h not in hf]
    qkv = _qkv_names(cfg, fmt)
    for name, parts in qkv.items():
        if all(p in hf for p in parts):
            state[name] = torch.cat([hf[p] for p in parts], dim=0)
        else:
            absent.append(name)
    used = set(mapping.values()) | {p for parts in qkv.values() for p in parts}
    unused = [k for k in hf if k not in used and not any(s in k for s in fmt.ignored)]
    foreign = [k for k in unused if k.startswith(tuple(fmt.prefix + r for r in _roots(fmt)))]
    if foreign:
        raise CheckpointError(f"{source}: unexpected weights {foreign[:5]} (+{max(0, len(foreign) - 5)} more)")
    if unused:
        log.info("%s: weights not used: %s", source, unused)
    return state, absent


def _roots(fmt: EncoderFormat) -> set[str]:
    """First name parts of the backbone under the prefix (``embeddings.``, ``encoder.`` …)."""
    names = [*fmt.embeddings.values(), fmt.layer]
    return {n.split(".")[0] + "." for n in names}


def with_prefix(hf: dict[str, torch.Tensor], fmt: EncoderFormat = BERT_FORMAT) -> dict[str, torch.Tensor]:
    """Bare ``AutoModel`` checkpoints name ``embeddings.…``; full ones ``bert.embeddings.…``."""
    bare = (*_roots(fmt), "pooler.")
    return {(fmt.prefix + k if k.startswith(bare) else k): v for k, v in hf.items()}


_with_bert_prefix = with_prefix  # the name hf_tasks and older code use


def save_hf_bert(model: BertForPreTraining, directory: str | Path, tokenizer=None,
                 dropout: tuple[float, float] | None = None, fmt: EncoderFormat = BERT_FORMAT,
                 provenance: Provenance | None = None) -> Path:
    """Write an HF directory: config.json, model.safetensors, (given one) the tokenizer and a
    model card (:mod:`muppets.interop.model_card`, from ``provenance``).
    ``dropout``: the (hidden, attention) dropout config.json states, when the model was trained
    with other rates than its users should fine-tune with (default: the model's own).
    ``fmt``: the family whose names it is written in (default BERT's)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cfg = model.cfg if dropout is None else dataclasses.replace(model.cfg, hidden_dropout=dropout[0],
                                                                attention_dropout=dropout[1])
    write_weights(to_hf_state(model, fmt=fmt), directory / "model.safetensors", metadata={"format": "pt"})
    write_config(directory, fmt.to_config(cfg))
    if tokenizer is not None:
        tokenizer.save(directory)
    write_model_card(directory, provenance)
    return directory


LOADED_OVERRIDES = ("hidden_dropout", "attention_dropout", "tie_word_embeddings")  # shape-preserving config fields


def load_hf_bert(directory: str | Path, fmt: EncoderFormat = BERT_FORMAT, heads: Collection[str] = (),
                 **config_overrides) -> BertForPreTraining:
    """Load an HF encoder directory (BERT's names, or ``fmt``'s). Backbone weights must all be
    present; missing heads (e.g. a bare ``BertModel``) keep their fresh initialisation.
    ``heads``: the pretraining heads the caller runs (``"mlm"``, ``"nsp"``; the pooler counts as
    NSP's): their missing weights are a warning, those of heads nobody runs (an encoder's
    users: embed, probe, serve) only a debug line (:func:`report_absent`). ``config_overrides``:
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
    cfg = dataclasses.replace(fmt.from_config(data, str(cfg_path)), **config_overrides)
    model = BertForPreTraining(cfg)
    _warn_untied(weights, cfg, fmt, directory)
    state, absent = from_hf_state(weights, cfg, str(directory), fmt=fmt)
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
    report_absent(directory, absent, heads, cfg.tie_word_embeddings)
    model.load_state_dict(state, strict=False)
    return model


HEAD_OF = {"pooler": "nsp"}  # in a pretraining model the pooler feeds the NSP head only


def report_absent(directory: Path, absent: Collection[str], heads: Collection[str], tied: bool) -> None:
    """Log the head weights a checkpoint lacks (:func:`load_hf_bert`): a warning per head in
    ``heads`` (it starts fresh and its outputs mean nothing until trained), a debug line for
    the others (a bare encoder such as all-MiniLM-L6-v2 has no MLM head, and an encoder's
    users never run one)."""
    by_head: dict[str, list[str]] = {}
    for name in sorted(absent):
        first = name.split(".")[0]
        by_head.setdefault(HEAD_OF.get(first, first), []).append(name)
    for head, names in by_head.items():
        if head not in heads:
            log.debug("%s: no weights for %s, of the %s head, which is not used here", directory, names, head)
        elif head == "mlm":
            log.warning("%s has no MLM head (a bare encoder, or an ELECTRA discriminator): %s start fresh, the "
                        "decoder is %s", directory, names, "tied to its word embeddings" if tied else
                        "a copy of its word embeddings")
        else:
            log.warning("%s has no %s head: %s start fresh", directory, head.upper(), names)


def _warn_untied(weights: dict[str, torch.Tensor], cfg: BertConfig, fmt: EncoderFormat, directory: Path) -> None:
    """A stored MLM decoder that differs from the word embeddings is dropped when tying: say so."""
    decoder = weights.get(fmt.decoder[0])
    embeddings = with_prefix(weights, fmt).get(fmt.prefix + fmt.embeddings["embeddings.tokens.weight"])
    if cfg.tie_word_embeddings and decoder is not None and embeddings is not None and not torch.equal(decoder, embeddings):
        log.warning("%s: its MLM decoder differs from its word embeddings, and tie_word_embeddings is true here: "
                    "the decoder is dropped and the word embeddings decode", directory)


def _check_shape(model: torch.nn.Module, name: str, tensor: torch.Tensor, source: Path) -> None:
    expected = model.state_dict()[name].shape
    if tensor.shape != expected:
        raise CheckpointError(f"{source}: {name} has shape {tuple(tensor.shape)}, config implies {tuple(expected)}")
