"""Settings of ``muppets serve``: one dataclass, every field commented."""

from __future__ import annotations

import os
from dataclasses import dataclass

from muppets.errors import ConfigError
from muppets.sentence.names import MODES as POOLINGS  # sentence vectors: cls | mean | max | mean_sqrt_len | weighted_mean | last

BACKENDS = ("auto", "torch", "onnx")  # what runs the forward pass (muppets.serve.onnx_backend)
PRECISIONS = ("float32", "bf16", "int8")  # the linear layers: muppets.runtime.PRECISIONS (no torch import here: --help)


@dataclass
class ServeConfig:
    model_dir: str = ""  # the directory (or "minilm", or a muppets run) the server loads once
    host: str = "127.0.0.1"  # loopback by default: expose on purpose (e.g. 0.0.0.0), behind a proxy with TLS
    port: int = 8000  # TCP port (0 = any free port; the bound one is logged)
    model_name: str = ""  # name clients send as "model" ("" = the directory's; its run's for best/, final/)
    max_batch_tokens: int = 8192  # padded tokens (rows x longest row) one forward pass may take
    max_batch_size: int = 64  # inputs per forward pass; 1 = no batching (the batch-1 baseline)
    max_wait_ms: float = 5.0  # how long the oldest waiting input may wait for others to join its batch
    queue_size: int = 1024  # inputs waiting at most; beyond, requests get 503 + Retry-After (must be >= max_inputs)
    threads: int = 0  # torch (and onnxruntime) intra-op threads (0 = the default: one per core)
    backend: str = "auto"  # torch | onnx (an export: muppets export onnx) | auto (the faster of both, measured at startup)
    device: str = "cpu"  # cpu | cuda | cuda:N: where torch engines run (onnx runs on the CPU)
    precision: str = "float32"  # encoders and task models: float32 | bf16 (torch only) | int8 (dynamic quantization; torch, or an int8 ONNX export)
    api_key: str = ""  # if set, every route but /health needs "Authorization: Bearer <key>" (env MUPPETS_API_KEY)
    max_inputs: int = 256  # inputs one request may carry, completions: prompts x n (413 beyond)
    max_chars: int = 20000  # characters one input may have (413 beyond)
    max_body_bytes: int = 4 << 20  # request body size limit in bytes (413 beyond)
    max_new_tokens: int = 512  # largest max_tokens a completion may ask for (413 beyond)
    pooling: str = ""  # embeddings: cls | mean | max | mean_sqrt_len | weighted_mean | last ("" = as the model's config says, else mean)
    normalize: bool | None = None  # embeddings: unit length (None = as the model's config says, else no)
    shutdown_timeout: float = 30.0  # seconds a graceful shutdown waits for requests in flight
    log_level: str = "info"  # uvicorn's log level: critical | error | warning | info | debug

    def __post_init__(self) -> None:
        if not self.api_key:
            self.api_key = os.environ.get("MUPPETS_API_KEY", "")
        positive = ("max_batch_tokens", "max_batch_size", "queue_size", "max_inputs", "max_chars",
                    "max_body_bytes", "max_new_tokens")
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name}={getattr(self, name)!r}: must be >= 1", key=name)
        for name, ok, rule in (("max_wait_ms", self.max_wait_ms >= 0, ">= 0"), ("threads", self.threads >= 0, ">= 0"),
                               ("port", 0 <= self.port < 65536, "within 0 … 65535")):
            if not ok:
                raise ConfigError(f"{name}={getattr(self, name)!r}: must be {rule}", key=name)
        if self.queue_size < self.max_inputs:
            raise ConfigError(f"queue_size={self.queue_size} < max_inputs={self.max_inputs}: a request of more than "
                              f"{self.queue_size} inputs (or prompts x n completions) could never be queued; raise "
                              f"queue_size to at least {self.max_inputs} or lower max_inputs", key="queue_size")
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend {self.backend!r} is not one of {', '.join(BACKENDS)}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.precision == "bf16" and self.backend == "onnx":
            raise ConfigError("precision bf16 runs in torch: the ONNX backend is float32 or int8 (use --backend torch or auto)")
        if self.pooling and self.pooling not in POOLINGS:
            raise ConfigError(f"pooling {self.pooling!r} is not one of {', '.join(POOLINGS)}")
