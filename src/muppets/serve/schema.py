"""Request bodies, checked field by field: every mistake is a 4xx naming the field and the value.

Wrong JSON types, empty inputs and values out of range are 422; more inputs or longer inputs
than the server takes are 413; unknown fields are 422 too (a misspelt ``max_token`` would
otherwise be silently ignored). Fields follow OpenAI's API where one exists; the others are
muppets' (``top_k``, ``repetition_penalty``, ``ignore_eos``, ``truncate``,
``return_probabilities``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from muppets.serve.config import ServeConfig
from muppets.serve.errors import ApiError

_NUMBER = (int, float)


def _check_fields(body: Any, allowed: set[str]) -> dict:
    if not isinstance(body, dict):
        raise ApiError(422, f"the request body must be a JSON object, not {type(body).__name__}")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise ApiError(422, f"unknown field(s) {', '.join(map(repr, unknown))}; this route takes "
                            f"{', '.join(sorted(allowed))}", param=unknown[0])
    return body


def _typed(body: dict, name: str, types: tuple[type, ...], default: Any, what: str) -> Any:
    """``body[name]`` (or ``default`` when absent or null) when of ``types`` (never a bool for numbers)."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise ApiError(422, f"{name} must be {what}, got {value!r}", param=name)
    return value


def _ranged(body: dict, name: str, default: float, low: float, high: float, integer: bool = False,
            open_low: bool = False) -> Any:
    value = _typed(body, name, (int,) if integer else _NUMBER, default, "an integer" if integer else "a number")
    if value < low or value > high or (open_low and value == low):
        bound = f"{'above' if open_low else 'at least'} {low} and at most {high}"
        raise ApiError(422, f"{name} must be {bound}, got {value!r}", param=name)
    return value


def texts(body: dict, name: str, cfg: ServeConfig) -> list[str]:
    """A string or a non-empty list of strings, within the request size limits."""
    value = body.get(name)
    if value is None:
        raise ApiError(422, f"{name} is required: a string or a list of strings", param=name)
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ApiError(422, f"{name} must be a string or a non-empty list of strings, got {value!r}"[:300], param=name)
    if len(items) > cfg.max_inputs:
        raise ApiError(413, f"{name} has {len(items)} items; this server takes at most {cfg.max_inputs} "
                            "per request", param=name)
    for i, text in enumerate(items):
        if not isinstance(text, str):
            hint = " (token-id inputs are not supported: send text)" if isinstance(text, int) else ""
            raise ApiError(422, f"{name}[{i}] must be a string, got {type(text).__name__}{hint}", param=name)
        if not text.strip():
            raise ApiError(422, f"{name}[{i}] is empty", param=name)
        if len(text) > cfg.max_chars:
            raise ApiError(413, f"{name}[{i}] has {len(text)} characters; this server takes at most "
                                f"{cfg.max_chars}", param=name)
    return items


def model_name(body: dict, served: str) -> None:
    """An explicit ``model`` must name the served model (404, as OpenAI answers)."""
    asked = _typed(body, "model", (str,), None, "a string")
    if asked is not None and asked != served:
        raise ApiError(404, f"model {asked!r} is not served here; this server serves {served!r}",
                       param="model", code="model_not_found")


# ----------------------------------------------------------------------------- routes


@dataclass
class EmbeddingRequest:
    texts: list[str]
    base64: bool = False  # encoding_format "base64": little-endian float32 bytes
    truncate: bool = False


def embeddings(body: Any, cfg: ServeConfig, served: str, dim: int) -> EmbeddingRequest:
    body = _check_fields(body, {"input", "model", "encoding_format", "dimensions", "user", "truncate"})
    model_name(body, served)
    fmt = _typed(body, "encoding_format", (str,), "float", "a string")
    if fmt not in ("float", "base64"):
        raise ApiError(422, f"encoding_format must be 'float' or 'base64', got {fmt!r}", param="encoding_format")
    dims = _typed(body, "dimensions", (int,), dim, "an integer")
    if dims != dim:
        raise ApiError(422, f"dimensions={dims}: this model's vectors have {dim} dimensions and cannot be "
                            "shortened", param="dimensions")
    _typed(body, "user", (str,), "", "a string")
    truncate = _typed(body, "truncate", (bool,), False, "true or false")
    return EmbeddingRequest(texts(body, "input", cfg), fmt == "base64", truncate)


@dataclass
class CompletionRequest:
    prompts: list[str | list[int]]
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    n: int = 1
    stream: bool = False
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    echo: bool = False
    ignore_eos: bool = False  # generate max_tokens even past end-of-text (benchmarks)


_COMPLETION_FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "n", "stream", "stop",
                      "seed", "echo", "repetition_penalty", "logprobs", "presence_penalty", "frequency_penalty",
                      "suffix", "best_of", "user", "logit_bias", "stream_options", "ignore_eos"}


def completions(body: Any, cfg: ServeConfig, served: str, vocab_size: int) -> CompletionRequest:
    body = _check_fields(body, _COMPLETION_FIELDS)
    model_name(body, served)
    _unsupported(body)
    req = CompletionRequest(
        prompts=_prompts(body, cfg, vocab_size),
        max_tokens=_ranged(body, "max_tokens", 16, 1, 1 << 30, integer=True),
        temperature=float(_ranged(body, "temperature", 1.0, 0.0, 2.0)),
        top_p=float(_ranged(body, "top_p", 1.0, 0.0, 1.0, open_low=True)),
        top_k=_ranged(body, "top_k", 0, 0, 1 << 30, integer=True),
        repetition_penalty=float(_ranged(body, "repetition_penalty", 1.0, 0.0, 100.0, open_low=True)),
        n=_ranged(body, "n", 1, 1, 16, integer=True),
        stream=_typed(body, "stream", (bool,), False, "true or false"),
        stop=_stops(body), seed=_typed(body, "seed", (int,), None, "an integer"),
        echo=_typed(body, "echo", (bool,), False, "true or false"),
        ignore_eos=_typed(body, "ignore_eos", (bool,), False, "true or false"))
    if req.max_tokens > cfg.max_new_tokens:
        raise ApiError(413, f"max_tokens={req.max_tokens}; this server generates at most {cfg.max_new_tokens} "
                            "tokens per completion", param="max_tokens")
    if len(req.prompts) * req.n > cfg.max_inputs:
        raise ApiError(413, f"{len(req.prompts)} prompts x n={req.n} completions; this server takes at most "
                            f"{cfg.max_inputs} per request", param="n")
    return req


def _unsupported(body: dict) -> None:
    for name, neutral in (("logprobs", (None, 0)), ("suffix", (None, "")), ("presence_penalty", (None, 0)),
                          ("frequency_penalty", (None, 0)), ("logit_bias", (None, {}))):
        if body.get(name) not in neutral:
            hint = " (repetition_penalty is)" if name.endswith("_penalty") else ""
            raise ApiError(422, f"{name} is not supported by this server{hint}", param=name)
    if body.get("best_of") not in (None, 1, body.get("n", 1)):
        raise ApiError(422, "best_of is not supported by this server (use n)", param="best_of")


def _prompts(body: dict, cfg: ServeConfig, vocab_size: int) -> list[str | list[int]]:
    value = body.get("prompt")
    if isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        value = [value]  # one prompt as token ids
    if isinstance(value, list) and value and all(isinstance(p, list) for p in value):
        for i, ids in enumerate(value):
            if not ids or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size for t in ids):
                raise ApiError(422, f"prompt[{i}] must be a non-empty list of token ids in 0 … {vocab_size - 1}",
                               param="prompt")
        if len(value) > cfg.max_inputs:
            raise ApiError(413, f"prompt has {len(value)} items; this server takes at most {cfg.max_inputs}",
                           param="prompt")
        return value
    if value == "" or value == [""]:
        return [""]  # no prompt: generation starts from end-of-text, as GPT-2 samples unconditionally
    return texts(body, "prompt", cfg)


def _stops(body: dict) -> list[str]:
    stop = body.get("stop")
    stops = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or len(stops) > 4 or not all(isinstance(s, str) and s for s in stops):
        raise ApiError(422, f"stop must be a non-empty string or a list of at most 4, got {stop!r}", param="stop")
    return stops


@dataclass
class FillMaskRequest:
    texts: list[str]
    top_k: int = 5
    truncate: bool = False


def fill_mask(body: Any, cfg: ServeConfig, served: str) -> FillMaskRequest:
    body = _check_fields(body, {"inputs", "model", "top_k", "truncate"})
    model_name(body, served)
    top_k = _ranged(body, "top_k", 5, 1, 100, integer=True)
    truncate = _typed(body, "truncate", (bool,), False, "true or false")
    return FillMaskRequest(texts(body, "inputs", cfg), top_k, truncate)


@dataclass
class PredictRequest:
    inputs: list[Any]
    probabilities: bool = False


def predict(body: Any, cfg: ServeConfig, served: str) -> PredictRequest:
    body = _check_fields(body, {"inputs", "model", "return_probabilities"})
    model_name(body, served)
    inputs = body.get("inputs")
    if isinstance(inputs, (str, dict)):
        inputs = [inputs]
    if not isinstance(inputs, list) or not inputs:
        raise ApiError(422, "inputs is required: a non-empty list (one input per item; see /health for the task)",
                       param="inputs")
    if len(inputs) > cfg.max_inputs:
        raise ApiError(413, f"inputs has {len(inputs)} items; this server takes at most {cfg.max_inputs} per request",
                       param="inputs")
    longest = max(len(str(x)) for x in inputs)
    if longest > cfg.max_chars:
        raise ApiError(413, f"an input has {longest} characters; this server takes at most {cfg.max_chars}",
                       param="inputs")
    return PredictRequest(inputs, _typed(body, "return_probabilities", (bool,), False, "true or false"))
