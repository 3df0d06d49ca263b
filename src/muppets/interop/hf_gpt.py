"""Hugging Face GPT-2 (and GPT-1 ``openai-gpt``) directories <-> :class:`GPTLanguageModel`.

Hugging Face stores GPT weights in ``Conv1D`` layers whose weight is ``(in, out)``, the
transpose of ``nn.Linear``; the key map below marks those and transposes them both ways. We
write ``config.json`` + ``model.safetensors`` that ``GPT2LMHeadModel.from_pretrained`` (or
``OpenAIGPTLMHeadModel``) loads with no missing or unexpected weights (the LM head is tied to the
token embeddings, so it is not stored), and we read both ``…LMHeadModel`` checkpoints
(``transformer.`` prefix) and bare ``GPT2Model`` ones (no prefix, e.g. the original ``gpt2``).

Our GPT ties its output layer to the token embeddings, so a checkpoint with a separate one
(``tie_word_embeddings: false``, or an ``lm_head.weight`` that differs from the token
embeddings) is refused with a :class:`~muppets.errors.CheckpointError` rather than loaded with
other logits than transformers gives. ``config.json`` is checked against the tensor shapes in the
safetensors headers before the model is built, so a crafted config cannot force a huge allocation.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from muppets.config import from_dict
from muppets.errors import CheckpointError
from muppets.interop.model_card import Provenance, write_config, write_model_card
from muppets.interop.safetensors_io import read_json_object, read_shapes, read_weights, write_weights
from muppets.models.gpt import GPTBackbone, GPTConfig, GPTLanguageModel

log = logging.getLogger(__name__)

_CONFIG_MAP = {  # ours -> HF config.json, per model_type
    "gpt2": {"vocab_size": "vocab_size", "max_position_embeddings": "n_positions",
             "hidden_size": "n_embd", "num_layers": "n_layer", "num_heads": "n_head",
             "hidden_dropout": "resid_pdrop", "embedding_dropout": "embd_pdrop",
             "attention_dropout": "attn_pdrop", "layer_norm_eps": "layer_norm_epsilon",
             "initializer_range": "initializer_range", "hidden_act": "activation_function"},
    "openai-gpt": {"vocab_size": "vocab_size", "max_position_embeddings": "n_positions",
                   "hidden_size": "n_embd", "num_layers": "n_layer", "num_heads": "n_head",
                   "hidden_dropout": "resid_pdrop", "embedding_dropout": "embd_pdrop",
                   "attention_dropout": "attn_pdrop", "layer_norm_eps": "layer_norm_epsilon",
                   "initializer_range": "initializer_range", "hidden_act": "afn"},
}
_MODEL_TYPE = {"gpt2": "gpt2", "gpt": "openai-gpt"}  # our variant -> HF model_type
_ARCH = {"gpt2": "GPT2LMHeadModel", "openai-gpt": "OpenAIGPTLMHeadModel"}
_EMBEDDINGS = {"gpt2": ("wte", "wpe"), "openai-gpt": ("tokens_embed", "positions_embed")}
_UNSUPPORTED = {"scale_attn_by_inverse_layer_idx": True, "add_cross_attention": True,
                "scale_attn_weights": False}  # GPT-2 options whose maths we do not implement
_IGNORED_HF_KEYS = ("attn.bias", "attn.masked_bias", "lm_head.weight", "position_ids")  # lm_head: _check_tied
_SIZES = ("vocab_size", "max_position_embeddings", "hidden_size", "num_layers", "num_heads")  # checked ints


def config_to_hf(cfg: GPTConfig) -> dict:
    """Our config as an HF ``config.json`` dict."""
    model_type = _MODEL_TYPE[cfg.variant]
    out = {hf: getattr(cfg, ours) for ours, hf in _CONFIG_MAP[model_type].items()}
    out.update(model_type=model_type, architectures=[_ARCH[model_type]], tie_word_embeddings=True,
               eos_token_id=cfg.eos_token_id)
    if model_type == "gpt2":
        out.update(n_inner=cfg.intermediate_size, n_ctx=cfg.max_position_embeddings,
                   bos_token_id=cfg.eos_token_id)
    elif cfg.intermediate_size != 4 * cfg.hidden_size:
        raise CheckpointError(f"openai-gpt directories need intermediate_size = 4 * hidden_size, "
                              f"not {cfg.intermediate_size}")
    return out


def config_from_hf(data: dict, source: str = "config.json") -> GPTConfig:
    """An HF ``gpt2`` / ``openai-gpt`` ``config.json`` dict as our :class:`GPTConfig`."""
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type not in _CONFIG_MAP:
        raise CheckpointError(f"{source}: model_type {model_type!r} is not 'gpt2' or 'openai-gpt'")
    for key, bad in _UNSUPPORTED.items():
        if data.get(key, not bad) == bad:
            raise CheckpointError(f"{source}: {key}={bad} is not supported")
    cmap = _CONFIG_MAP[model_type]
    missing = [hf for hf in cmap.values() if hf not in data and hf not in ("afn", "activation_function")]
    if missing:
        raise CheckpointError(f"{source}: missing keys {missing}")
    kwargs = {ours: data[hf] for ours, hf in cmap.items() if hf in data}
    sizes = {hf: data[hf] for ours, hf in cmap.items() if ours in _SIZES}
    if data.get("n_inner") is not None:
        sizes["n_inner"] = data["n_inner"]
    for key, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise CheckpointError(f"{source}: {key} must be a positive integer, not {value!r}")
    kwargs["variant"] = "gpt2" if model_type == "gpt2" else "gpt"
    kwargs["intermediate_size"] = data.get("n_inner") or 4 * data["n_embd"]
    eos = data.get("eos_token_id")
    kwargs["eos_token_id"] = eos if isinstance(eos, int) else -1  # GPT-1 has none: the last id
    return from_dict(GPTConfig, kwargs, prefix=f"{source}: ")  # type-checked: a ConfigError names the key


def param_map(cfg: GPTConfig) -> dict[str, tuple[str, bool]]:
    """Our parameter name -> (HF name without the ``transformer.`` prefix, transposed?)."""
    wte, wpe = _EMBEDDINGS[_MODEL_TYPE[cfg.variant]]
    out = {"backbone.embeddings.tokens.weight": (wte + ".weight", False),
           "backbone.embeddings.positions.weight": (wpe + ".weight", False)}
    if cfg.variant == "gpt2":
        out.update({f"backbone.final_norm.{p}": (f"ln_f.{p}", False) for p in ("weight", "bias")})
    for i in range(cfg.num_layers):
        ours, hf = f"backbone.layers.{i}.", f"h.{i}."
        modules = {"attn.qkv": ("attn.c_attn", True), "attn.out": ("attn.c_proj", True),
                   "attn_norm": ("ln_1", False), "ffn.up": ("mlp.c_fc", True),
                   "ffn.down": ("mlp.c_proj", True), "ffn_norm": ("ln_2", False)}
        for name, (hf_name, conv) in modules.items():
            out[f"{ours}{name}.weight"] = (f"{hf}{hf_name}.weight", conv)
            out[f"{ours}{name}.bias"] = (f"{hf}{hf_name}.bias", False)
    return out


def to_hf_state(model: GPTLanguageModel | GPTBackbone) -> dict[str, torch.Tensor]:
    """Our weights (a whole LM, or just its backbone) under HF ``GPT2LMHeadModel`` names,
    Conv1D weights transposed."""
    ours = model.state_dict()
    if isinstance(model, GPTBackbone):
        ours = {"backbone." + k: v for k, v in ours.items()}
    return {"transformer." + hf: (ours[name].t() if conv else ours[name]).contiguous()
            for name, (hf, conv) in param_map(model.cfg).items()}


def from_hf_state(hf: dict[str, torch.Tensor], cfg: GPTConfig, source: str) -> dict[str, torch.Tensor]:
    """HF tensors (``transformer.``-prefixed or bare) -> our state dict; every weight must be there."""
    hf = {k.removeprefix("transformer."): v for k, v in hf.items()}
    mapping = param_map(cfg)
    missing = [h for h, _ in mapping.values() if h not in hf]
    if missing:
        raise CheckpointError(f"{source}: missing weights {missing[:5]} (+{max(0, len(missing) - 5)} more)")
    used = {h for h, _ in mapping.values()}
    unused = [k for k in hf if k not in used and not k.endswith(_IGNORED_HF_KEYS)]
    if unused:
        raise CheckpointError(f"{source}: unexpected weights {unused[:5]} (+{max(0, len(unused) - 5)} more)")
    return {name: hf[h].t() if conv else hf[h] for name, (h, conv) in mapping.items()}


def save_hf_gpt(model: GPTLanguageModel | GPTBackbone, directory: str | Path, tokenizer=None,
                extra_config: dict | None = None, provenance: Provenance | None = None) -> Path:
    """Write config.json (plus ``extra_config`` keys), model.safetensors, (given one) the
    tokenizer's files and a model card (from ``provenance``); a bare backbone is saved as the LM
    it ties its output layer to."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_weights(to_hf_state(model), directory / "model.safetensors", metadata={"format": "pt"})
    write_config(directory, {**config_to_hf(model.cfg), **(extra_config or {})})
    if tokenizer is not None:
        tokenizer.save(directory)
    write_model_card(directory, provenance)
    return directory


def load_hf_gpt(directory: str | Path, **config_overrides) -> GPTLanguageModel:
    """Load an HF GPT-2 / GPT-1 directory (safetensors) as a :class:`GPTLanguageModel`.

    The config is checked against the weights' shapes (read from the safetensors headers)
    before anything is built; an untied output layer is refused (see the module docstring)."""
    directory = Path(directory)
    cfg_path = directory / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{directory}: no config.json (is this a Hugging Face model directory?)")
    data = read_json_object(cfg_path)
    cfg = config_from_hf(data, str(cfg_path))
    if config_overrides:
        cfg = GPTConfig(**{**cfg.__dict__, **config_overrides})
    shapes = {k.removeprefix("transformer."): v for k, v in read_shapes(directory).items()}
    _check_shapes(cfg, shapes, cfg_path)
    hf = read_weights(directory)
    _check_tied(hf, shapes, data, cfg, cfg_path)
    model = GPTLanguageModel(cfg)
    model.load_state_dict(from_hf_state(hf, cfg, str(directory)), strict=True)
    return model


def _check_shapes(cfg: GPTConfig, shapes: dict[str, tuple[tuple[int, ...], Path]], cfg_path: Path) -> None:
    """Every weight ``cfg`` needs is in ``shapes`` (HF name without prefix -> (shape, file)) with
    the shape ``cfg`` implies; checked before the model is built (the expected shapes come from
    a model on the meta device, which allocates nothing)."""
    files = {str(f) for _, f in shapes.values()}
    weights = files.pop() if len(files) == 1 else str(cfg_path.parent)
    layers = {k.split(".")[1] for k in shapes if k.startswith("h.")}
    if cfg.num_layers > len(layers):  # before param_map, whose size is the configured n_layer
        raise CheckpointError(f"{weights}: missing weights: {cfg_path} sets {cfg.num_layers} layers, "
                              f"the weights hold {len(layers)}")
    missing = [h for h, _ in param_map(cfg).values() if h not in shapes]
    if missing:
        raise CheckpointError(f"{weights}: missing weights {missing[:5]} (+{max(0, len(missing) - 5)} more)")
    wte, wpe = (name + ".weight" for name in _EMBEDDINGS[_MODEL_TYPE[cfg.variant]])
    for h, want in ((wte, (cfg.vocab_size, cfg.hidden_size)), (wpe, (cfg.max_position_embeddings, cfg.hidden_size))):
        if shapes[h][0] != want:  # V, T and H first: the model below is only built with real ones
            raise CheckpointError(f"{shapes[h][1]}: {h} has shape {shapes[h][0]}, {cfg_path} implies {want}")
    try:
        with torch.device("meta"):
            expected = GPTLanguageModel(cfg).state_dict()
    except (RuntimeError, ValueError, TypeError) as err:  # an n_inner whose size overflows int64, a dropout of 2
        raise CheckpointError(f"{cfg_path}: does not describe a buildable model ({err})") from err
    for name, (h, conv) in param_map(cfg).items():
        want = tuple(expected[name].shape)[::-1] if conv else tuple(expected[name].shape)
        shape, path = shapes[h]
        if shape != want:
            raise CheckpointError(f"{path}: {h} has shape {shape}, {cfg_path} implies {want}")


def _check_tied(hf: dict[str, torch.Tensor], shapes: dict[str, tuple[tuple[int, ...], Path]],
                data: dict, cfg: GPTConfig, cfg_path: Path) -> None:
    """Refuse an output layer that is not the token embeddings: a stored ``lm_head.weight`` that
    differs from them (transformers then keeps it untied, even with ``tie_word_embeddings``), or
    ``tie_word_embeddings: false`` with no head stored (transformers would draw it at random)."""
    wte = "transformer." + _EMBEDDINGS[_MODEL_TYPE[cfg.variant]][0] + ".weight"
    wte = wte if wte in hf else wte.removeprefix("transformer.")
    if "lm_head.weight" in hf:
        if not torch.equal(hf["lm_head.weight"], hf[wte]):
            raise CheckpointError(
                f"{shapes['lm_head.weight'][1]}: lm_head.weight differs from {wte} (an untied output "
                "layer); muppets' GPT ties its output layer to the token embeddings and cannot load it")
    elif data.get("tie_word_embeddings", True) is False:
        raise CheckpointError(f"{cfg_path}: tie_word_embeddings is false but the weights hold no "
                              "lm_head.weight; muppets' GPT ties its output layer to the token embeddings")
