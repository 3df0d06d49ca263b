"""``muppets serve``: an HTTP API for every model muppets makes, with dynamic batching.

Routes (only those the loaded model supports are active; the others answer 404 saying why):

- ``POST /v1/embeddings`` — OpenAI-compatible; pooling as the model's sentence-transformers
  config says (:mod:`~muppets.sentence`: pooling, dense, normalize);
- ``POST /v1/completions`` — OpenAI-compatible, GPT models, ``"stream": true`` as server-sent events;
- ``POST /predict`` — a fine-tuned task directory of any kind (:mod:`~muppets.serve.tasks`);
- ``POST /fill-mask`` — BERT with its masked-LM head (:mod:`~muppets.serve.fill_mask`);
- ``GET /health``, ``GET /v1/models``, ``GET /metrics`` (Prometheus text, :mod:`~muppets.serve.metrics`).

Data flows one way: request JSON -> :mod:`~muppets.serve.schema` (checked fields) -> an
engine's work items (:mod:`~muppets.serve.engines`, token ids) -> the
:class:`~muppets.serve.batcher.Batcher` (one worker thread, one model copy, batches by a token
budget and a maximum wait, length-bucketed, bounded queue) -> the library (``Predictor``, the
backbones, :func:`muppets.generate.generate`) -> JSON.

**Why Starlette + uvicorn.** The server needs an ASGI event loop that stays free while a worker
thread runs the model, streaming responses, lifespan hooks and graceful shutdown that waits for
requests in flight. Starlette (the toolkit FastAPI is built on) gives exactly that with two small
pure-Python dependencies and a stable, actively maintained API; uvicorn is its reference server
(graceful shutdown with a timeout, signal handling), which runs on httptools' C HTTP parser and
uvloop when they are installed (the ``serve`` extra installs both: on a 2-core CPU, time not
spent parsing requests is time for the model). FastAPI would add pydantic-driven
validation and OpenAPI pages, but its automatic 422 bodies do not follow OpenAI's error shape
and every request would pay for model validation; the few request schemas here are checked by
hand (:mod:`~muppets.serve.schema`) with messages that name the field and the value.

Usage::

    muppets serve --model minilm --port 8000 --max-batch-tokens 8192 --max-wait-ms 5
    curl -s localhost:8000/v1/embeddings -d '{"input": ["a gripping film", "dull"]}'

    from muppets.serve import ServeConfig, running_server
    with running_server(ServeConfig("runs/sst2/best", port=0)) as url:
        ...  # POST f"{url}/predict" {"inputs": ["a gripping film"]}
"""

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ below imports on use
    from muppets.serve.app import build_app, running_server, serve
    from muppets.serve.batcher import Batcher, QueueFull, RequestTooLarge, Work
    from muppets.serve.config import ServeConfig
    from muppets.serve.engines import Engine, load_engine

# the names below load their module on first use (PEP 562), so `muppets serve --help` and
# `muppets --help` do not import torch, Starlette and uvicorn just to list the options
_EXPORTS = {"build_app": "app", "running_server": "app", "serve": "app", "Batcher": "batcher",
            "QueueFull": "batcher", "RequestTooLarge": "batcher", "Work": "batcher", "ServeConfig": "config",
            "Engine": "engines", "load_engine": "engines"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """An exported name, or a submodule (``muppets.serve.app`` after ``import muppets.serve``)."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    elif importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
