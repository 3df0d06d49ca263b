"""``muppets serve --model MODEL …``: the argparse entry (wired into :mod:`muppets.cli`).

Imports nothing of the server until it runs, so ``muppets --help`` works without the ``serve``
extra (``pip install -e ".[serve]"``).
"""

from __future__ import annotations

import argparse
import sys
from muppets.cliargs import add_model_argument, settle_model
from muppets.errors import MuppetsError
from muppets.serve.config import BACKENDS, POOLINGS, PRECISIONS, ServeConfig

def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``serve`` to the ``muppets`` subcommands; returns its parser."""
    d = ServeConfig()
    s = sub.add_parser("serve", help="serve a model over HTTP: OpenAI-style /v1/embeddings and /v1/completions, "
                       "/predict, /fill-mask, /health, /metrics (dynamic batching)",
                       description="Serve a model over HTTP. /v1/completions takes OpenAI's defaults: it samples at "
                                   "temperature 1 unless a request sends \"temperature\": 0 (greedy, what 'muppets "
                                   "generate' does unless --sample).")
    add_model_argument(s, "a fine-tuned task directory, an HF BERT / GPT directory or muppets run, 'minilm', "
                          "an ELMo / NNLM / word2vec run or a word-vector file")
    s.add_argument("--host", default=d.host, help="address to bind (default: loopback only)")
    s.add_argument("--port", type=int, default=d.port, help="TCP port (0 = any free one)")
    s.add_argument("--model-name", default="",
                   help="the name clients send as 'model' (default: the directory's; a run's for its best/ or final/)")
    s.add_argument("--max-batch-tokens", type=int, default=d.max_batch_tokens,
                   help="padded tokens (rows x longest row) per forward pass")
    s.add_argument("--max-batch-size", type=int, default=d.max_batch_size,
                   help="inputs per forward pass; 1 = no batching")
    s.add_argument("--max-wait-ms", type=float, default=d.max_wait_ms,
                   help="how long the oldest input waits for others to join its batch")
    s.add_argument("--queue-size", type=int, default=d.queue_size,
                   help="inputs waiting at most; beyond, 503 with Retry-After (at least --max-inputs)")
    s.add_argument("--threads", type=int, default=d.threads,
                   help="torch / onnxruntime threads (0 = the default: one per core)")
    s.add_argument("--backend", choices=BACKENDS, default=d.backend,
                   help="forward passes in torch, in onnxruntime (an export from 'muppets export onnx', in "
                        "MODEL_DIR or MODEL_DIR/onnx), or auto: the faster of the two, measured at startup")
    s.add_argument("--precision", choices=PRECISIONS, default=d.precision,
                   help="encoders and fine-tuned task models: bf16 keeps the linear layers' weights in bf16 (faster "
                        "on CPUs with AVX512-BF16 / AMX; implies the torch backend); int8 quantizes them dynamically "
                        "(int8 weights, inputs quantized per call; torch, or an export written with 'muppets export "
                        "onnx --quantize int8'). Outputs differ slightly from float32: 'muppets evaluate --precision' "
                        "scores the change, BENCHMARKS.md has measured speeds")
    s.add_argument("--device", default=d.device,
                   help="cpu (default), cuda or cuda:N: where the model runs (implies the torch backend on a GPU)")
    s.add_argument("--api-key", default="", help="require 'Authorization: Bearer KEY' (or set MUPPETS_API_KEY)")
    s.add_argument("--max-inputs", type=int, default=d.max_inputs, help="inputs per request at most (413 beyond)")
    s.add_argument("--max-chars", type=int, default=d.max_chars, help="characters per input at most (413 beyond)")
    s.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes, help="request body size limit")
    s.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, help="largest max_tokens of a completion")
    s.add_argument("--pooling", choices=POOLINGS, default=None,
                   help="embeddings' pooling, for BERT and GPT encoders (default: as the model's config says, else mean; "
                        "word-level models take only mean; a fine-tuned task model, none)")
    s.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                   help="unit-length embeddings (default: as the model's config says)")
    s.add_argument("--shutdown-timeout", type=float, default=d.shutdown_timeout,
                   help="seconds a graceful shutdown waits for requests in flight")
    s.add_argument("--log-level", default=d.log_level, choices=["critical", "error", "warning", "info", "debug"],
                   help=f"the server's log level (default {d.log_level})")
    s.set_defaults(func=run)
    return s


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    return ServeConfig(model_dir=settle_model(args), host=args.host, port=args.port, model_name=args.model_name,
                       max_batch_tokens=args.max_batch_tokens, max_batch_size=args.max_batch_size,
                       max_wait_ms=args.max_wait_ms, queue_size=args.queue_size, threads=args.threads,
                       backend=args.backend, precision=args.precision, device=args.device,
                       api_key=args.api_key, max_inputs=args.max_inputs, max_chars=args.max_chars,
                       max_body_bytes=args.max_body_bytes, max_new_tokens=args.max_new_tokens,
                       pooling=args.pooling or "", normalize=args.normalize,
                       shutdown_timeout=args.shutdown_timeout, log_level=args.log_level)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT / SIGTERM, finishing the requests in flight (after SIGTERM uvicorn then
    re-raises the signal, so the process ends as terminated by it, as service managers expect)."""
    try:
        from muppets.serve.app import serve
    except ImportError as err:
        print(f"muppets serve needs the 'serve' extra (pip install -e \".[serve]\"): {err}", file=sys.stderr)
        return 2
    try:
        serve(config_from_args(args))  # a bad model argument too is a one-line error
    except MuppetsError as err:
        print(f"muppets serve: error: {err}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m muppets.serve.cli --model MODEL …`` (the same as ``muppets serve``)."""
    import logging

    from muppets.cli import finish_subcommands

    parser = argparse.ArgumentParser(prog="muppets")
    parser.set_defaults(verbose=False)
    add_parser(parser.add_subparsers(dest="command", required=True))
    finish_subcommands(parser)  # as `muppets serve` parses: options in full, -v
    args = parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)])
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return args.func(args)


if __name__ == "__main__":
    from muppets.malloc import use_malloc

    try:
        use_malloc()  # on the malloc `muppets serve` runs on (muppets.malloc)
    except MuppetsError as err:
        print(f"muppets serve: error: {err}", file=sys.stderr)
        sys.exit(2)
    sys.exit(main())
