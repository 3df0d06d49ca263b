"""The Starlette application: routes, the API-key and metrics gate, errors as JSON, lifecycle.

:func:`build_app` wires one :class:`~muppets.serve.engines.Engine` (the model, loaded once) to
one :class:`~muppets.serve.batcher.Batcher` (started with the app, drained at shutdown);
:func:`serve` runs it under uvicorn; :func:`running_server` runs it in a background thread
(tests, notebooks, the benchmark).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from muppets.errors import ConfigError, MuppetsError
from muppets.heap import HeapTrimmer
from muppets.serve import schema
from muppets.serve.batcher import Batcher, BatchStats, QueueFull, RequestTooLarge, Ticket
from muppets.serve.config import ServeConfig
from muppets.serve.engines import COMPLETE, EMBED, FILL, PREDICT, Engine, load_engine
from muppets.serve.errors import ApiError
from muppets.serve.metrics import CONTENT_TYPE, Metrics

log = logging.getLogger(__name__)

KNOWN_ROUTES = (EMBED, COMPLETE, PREDICT, FILL, "/health", "/metrics", "/v1/models")


def error_response(err: ApiError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


def default_model_name(model_dir: str) -> str:
    """The name clients send as ``model`` when none is set: the directory's, or its run's when
    the directory is a run's ``best`` / ``final`` (``runs/mt/tasks/rte/best`` serves as ``rte``)."""
    if model_dir == "minilm":
        return "minilm"
    path = Path(os.path.abspath(model_dir))  # not resolve(): a link's own name is the one users chose
    return path.parent.name if path.name in ("best", "final") and path.parent.name else path.name


class Server:
    """The state the routes share: settings, engine, batcher, metrics."""

    def __init__(self, cfg: ServeConfig, engine: Engine, model_thread: ThreadPoolExecutor | None = None) -> None:
        self.cfg, self.engine = cfg, engine
        self.model_thread = model_thread  # the one thread that loaded the model runs its batches
        self.name = cfg.model_name or default_model_name(cfg.model_dir)
        self.batcher: Batcher | None = None
        self.arriving = 0  # model requests received and not yet queued (the batcher waits only for these)
        self.metrics = Metrics(lambda: self.batcher.queue_depth if self.batcher else 0)
        self.started = time.time()
        self.trimmer = HeapTrimmer(1.0)

    def start(self) -> None:
        c = self.cfg
        self.batcher = Batcher(self.engine.run, c.max_batch_tokens, c.max_batch_size, c.max_wait_ms, c.queue_size,
                               on_batch=self._batch_done,
                               expecting=lambda: self.arriving, executor=self.model_thread)

    def _batch_done(self, stats: BatchStats) -> None:
        """Worker thread, after each batch: metrics, and the heap trimmed now and then."""
        self.metrics.batch_done(stats.size, stats.padded_tokens, stats.seconds)
        self.trimmer.maybe()

    def stop(self) -> None:
        if self.batcher is not None:
            self.batcher.close(self.cfg.shutdown_timeout)
        if self.model_thread is not None:
            self.model_thread.shutdown(wait=False)

    def require(self, route: str) -> Any:
        if route not in self.engine.routes:
            raise ApiError(404, self.engine.why_not(route), code="route_not_served")
        return self.engine

    def arrive(self) -> Callable[[], None]:
        """Count a model request as on its way; the returned call (idempotent) says it is queued or gone."""
        self.arriving += 1
        done = [False]

        def settled() -> None:
            if not done[0]:
                done[0] = True
                self.arriving -= 1
                if self.batcher is not None:
                    self.batcher.nudge()

        return settled

    def enqueue(self, items: list, ticket: Ticket, request: Request) -> None:
        try:
            self.batcher.enqueue(items, ticket)
        except QueueFull as full:
            raise _overloaded(full) from None
        except RequestTooLarge as large:
            raise ApiError(413, str(large)) from None
        finally:
            request.state.settled()

    async def submit(self, items: list, request: Request) -> list:
        """Queue a request's items and wait for the results; a client that hangs up meanwhile
        has its waiting items dropped (no compute is spent on answers nobody reads)."""
        ticket = Ticket(len(items), asyncio.get_running_loop())
        self.enqueue(items, ticket, request)
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({ticket.future, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not ticket.future.done():
                raise ApiError(499, "the client closed the connection")  # nobody reads this answer
            return ticket.future.result()
        finally:
            gone.cancel()
            ticket.cancelled = True


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone (the body is already read: only a disconnect can come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _overloaded(full: QueueFull) -> ApiError:
    return ApiError(503, str(full), code="overloaded", headers={"Retry-After": str(full.retry_after)})


async def read_json(request: Request, limit: int) -> Any:
    """The body as JSON: 413 beyond ``limit`` bytes, 400 when it is not JSON."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the request body has {declared} bytes; this server takes at most {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"the request body exceeds {limit} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise ApiError(400, "the request body is empty; send a JSON object")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise ApiError(400, f"the request body is not valid JSON: {err}") from None


def endpoint(server: Server, fn: Callable) -> Callable:
    """A route handler whose errors become JSON answers (the server keeps serving)."""

    async def handle(request: Request) -> Response:
        request.state.settled = server.arrive() if request.method == "POST" else (lambda: None)
        try:
            return await fn(server, request)
        except ApiError as err:
            return error_response(err)
        except MuppetsError as err:  # a library check on the input (a DataError …)
            return error_response(ApiError(422, str(err)))
        except Exception as err:  # noqa: BLE001 - answer, log, keep serving
            log.exception("%s %s failed", request.method, request.url.path)
            return error_response(ApiError(500, f"internal error: {type(err).__name__}: {err}"))
        finally:
            request.state.settled()

    return handle


# ----------------------------------------------------------------------------- routes


async def health(server: Server, request: Request) -> Response:
    return JSONResponse({"status": "ok", "model": server.name, **server.engine.describe(),
                         "queue_depth": server.batcher.queue_depth if server.batcher else 0,
                         "uptime_s": round(time.time() - server.started, 3)})


async def metrics(server: Server, request: Request) -> Response:
    return Response(server.metrics.render(), media_type=CONTENT_TYPE)


async def models(server: Server, request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [{"id": server.name, "object": "model",
                                                      "created": int(server.started), "owned_by": "muppets"}]})


async def embeddings(server: Server, request: Request) -> Response:
    engine = server.require(EMBED)
    req = schema.embeddings(await read_json(request, server.cfg.max_body_bytes), server.cfg, server.name, engine.dim)
    items = engine.embedding_items(req.texts, req.truncate)
    vectors = await server.submit(items, request)
    tokens = sum(w.cost for w in items)
    server.metrics.count_tokens(EMBED, inputs=tokens)
    data = [{"object": "embedding", "index": i,
             "embedding": base64.b64encode(np.asarray(v, "<f4").tobytes()).decode() if req.base64 else v.tolist()}
            for i, v in enumerate(vectors)]
    return JSONResponse({"object": "list", "data": data, "model": server.name,
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


async def fill_mask(server: Server, request: Request) -> Response:
    from muppets.serve.fill_mask import fill_items

    engine = server.require(FILL)
    req = schema.fill_mask(await read_json(request, server.cfg.max_body_bytes), server.cfg, server.name)
    items = fill_items(engine, req.texts, req.top_k, req.truncate)
    results = await server.submit(items, request)
    server.metrics.count_tokens(FILL, inputs=sum(w.cost for w in items))
    return JSONResponse({"model": server.name, "results": results})


async def predict(server: Server, request: Request) -> Response:
    engine = server.require(PREDICT)
    req = schema.predict(await read_json(request, server.cfg.max_body_bytes), server.cfg, server.name)
    items = engine.predict_items(req.inputs, req.probabilities)
    answers = await server.submit(items, request)
    server.metrics.count_tokens(PREDICT, inputs=sum(w.cost for w in items))
    body = {"model": server.name, "task": engine.kind, "predictions": [a["prediction"] for a in answers]}
    if any("score" in a for a in answers):
        body["scores"] = [a.get("score") for a in answers]
    if req.probabilities and any("probabilities" in a for a in answers):
        body["probabilities"] = [a.get("probabilities") for a in answers]
    if any("words" in a for a in answers):  # a tagger's words of raw texts, which the probabilities are of
        body["words"] = [a.get("words") for a in answers]
    return JSONResponse(body)


async def completions(server: Server, request: Request) -> Response:
    from muppets.serve.completions import complete

    engine = server.require(COMPLETE)
    body = await read_json(request, server.cfg.max_body_bytes)
    req = schema.completions(body, server.cfg, server.name, engine.tok.vocab_size)
    include_usage = isinstance(body.get("stream_options"), dict) and bool(body["stream_options"].get("include_usage"))
    return await complete(server, request, engine, req, include_usage)


async def not_found(request: Request, exc: HTTPException) -> Response:
    if exc.status_code == 404:
        err = ApiError(404, f"no route {request.url.path}; routes: {', '.join(KNOWN_ROUTES)}")
    elif exc.status_code == 405:
        err = ApiError(405, f"{request.method} is not allowed on {request.url.path}",
                       headers={"Allow": exc.headers.get("Allow", "") if exc.headers else ""})
    else:
        err = ApiError(exc.status_code, str(exc.detail))
    return error_response(err)


# ----------------------------------------------------------------------------- gate


class Gate:
    """ASGI middleware: the API key (every route but /health) and per-request metrics."""

    def __init__(self, app: Any, server: Server) -> None:
        self.app, self.server = app, server
        key = server.cfg.api_key
        self.expected = f"Bearer {key}".encode() if key else None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        route = path if path in KNOWN_ROUTES else "other"
        status = [500]

        async def record(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        start = time.perf_counter()
        self.server.metrics.request_started()
        try:
            if self.expected is not None and path != "/health" and not self._authorized(scope):
                err = ApiError(401, "missing or wrong API key: send the header 'Authorization: Bearer <key>'",
                               headers={"WWW-Authenticate": "Bearer"})
                return await error_response(err)(scope, receive, record)
            await self.app(scope, receive, record)
        finally:
            self.server.metrics.request_done(route, status[0], time.perf_counter() - start)

    def _authorized(self, scope: dict) -> bool:
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        return hmac.compare_digest(given, self.expected)


# ----------------------------------------------------------------------------- app and running


def _load_on_model_thread(cfg: ServeConfig) -> tuple[Engine, ThreadPoolExecutor]:
    """:func:`load_engine` on a new one-thread executor, which then runs every batch.

    With torch's OpenMP runtime (libgomp), each thread that runs parallel regions keeps a pool of
    helper threads; once two such pools exist on a machine with as many cores as threads, the
    runtime stops letting its idle helpers spin and every parallel region pays for waking them:
    small-batch forward passes on 2 cores ran about half as fast on the batcher's thread as on
    the loading thread. So the model is loaded, measured (``--backend auto``) and run on one
    thread, and the event loop never starts a parallel region."""
    model_thread = ThreadPoolExecutor(1, thread_name_prefix="muppets-model")

    def load() -> Engine:
        set_threads(cfg.threads)
        return load_engine(cfg)

    try:
        return model_thread.submit(load).result(), model_thread
    except BaseException:
        model_thread.shutdown(wait=False)
        raise


def build_app(cfg: ServeConfig, engine: Engine | None = None) -> Starlette:
    """The ASGI app for ``cfg`` (``engine``: an already loaded one, else :func:`load_engine` on
    the thread that will run the batches: :func:`_load_on_model_thread`)."""
    if engine is None:
        engine, model_thread = _load_on_model_thread(cfg)
        server = Server(cfg, engine, model_thread)
    else:
        server = Server(cfg, engine)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        server.start()
        log.info("serving %s (%s) on %s", server.name, ", ".join(server.engine.routes), cfg.model_dir)
        try:
            yield
        finally:
            await asyncio.get_running_loop().run_in_executor(None, server.stop)

    routes = [Route("/health", endpoint(server, health), methods=["GET"]),
              Route("/metrics", endpoint(server, metrics), methods=["GET"]),
              Route("/v1/models", endpoint(server, models), methods=["GET"]),
              Route(EMBED, endpoint(server, embeddings), methods=["POST"]),
              Route(COMPLETE, endpoint(server, completions), methods=["POST"]),
              Route(PREDICT, endpoint(server, predict), methods=["POST"]),
              Route(FILL, endpoint(server, fill_mask), methods=["POST"])]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: not_found})
    app.state.server = server
    return Gate(app, server)


def _uvicorn_config(cfg: ServeConfig, engine: Engine | None):
    import uvicorn

    return uvicorn.Config(build_app(cfg, engine), host=cfg.host, port=cfg.port, log_level=cfg.log_level,
                          timeout_graceful_shutdown=cfg.shutdown_timeout, lifespan="on", access_log=False)


def set_threads(threads: int) -> None:
    """torch's intra-op threads (0: leave torch's default)."""
    import torch

    if threads > 0:
        torch.set_num_threads(threads)


def serve(cfg: ServeConfig, engine: Engine | None = None) -> None:
    """Load the model and serve until SIGINT / SIGTERM (then finish the requests in flight).

    The worker thread's Python steps (a decoding loop, tokenizing) would hold the GIL for up to
    the interpreter's switch interval (5 ms) while the event loop waits to answer or stream, so
    this process switches every 1 ms instead."""
    import sys

    import uvicorn

    check_address(cfg.host, cfg.port)
    sys.setswitchinterval(0.001)
    set_threads(cfg.threads)  # onnxruntime's setting; torch's is set again on the model thread
    uvicorn.Server(_uvicorn_config(cfg, engine)).run()


def check_address(host: str, port: int) -> None:
    """Raise :class:`ConfigError` when ``host:port`` cannot be bound (a port in use, a host name
    that does not resolve), before the model is loaded: uvicorn would only say so after. Binds
    as asyncio does: every address the host resolves to (``""``: every interface), IPv6 ones
    IPv6-only."""
    import socket

    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise ConfigError(f"--host {host}: {err.strerror}") from None
    for family, kind, proto, _, address in dict.fromkeys(infos):
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as err:
                raise ConfigError(f"--host {host} --port {port}: cannot listen on {address[0]} "
                                  f"({err.strerror})") from None


@contextlib.contextmanager
def running_server(cfg: ServeConfig, engine: Engine | None = None, timeout: float = 60.0) -> Iterator[str]:
    """Serve in a background thread; yields the base URL (``http://host:port``); stops on exit."""
    import uvicorn

    server = uvicorn.Server(_uvicorn_config(cfg, engine))  # off the main thread: uvicorn leaves signals alone
    thread = threading.Thread(target=server.run, name="muppets-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not start on {cfg.host}:{cfg.port}")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{cfg.host}:{port}"
    finally:
        server.should_exit = True
        thread.join(cfg.shutdown_timeout + 5)
