"""The HTTP side of ``/v1/completions``: prompts to token ids, one JSON answer or a stream of
server-sent events in OpenAI's format (``data: {chunk}`` lines, then ``data: [DONE]``).

A streamed request is queued before the response starts, so a full queue is still a plain 503;
once streaming, an error becomes a final ``data: {"error": …}`` event. A client that disconnects
stops its rows at the next token.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from muppets.serve.batcher import Ticket
from muppets.serve.engines import COMPLETE, LMEngine
from muppets.serve.errors import ApiError
from muppets.serve.generation import Sampling, completion_items
from muppets.serve.schema import CompletionRequest


def prompt_ids(engine: LMEngine, prompts: list[str | list[int]]) -> list[list[int]]:
    """Token ids per prompt; an empty prompt starts from end-of-text."""
    eos = engine.model.cfg.eos_token_id
    texts = [p for p in prompts if isinstance(p, str)]
    encoded = iter(engine.tok.encode_batch(texts)) if texts else iter(())
    return [list(p) if isinstance(p, list) else (next(encoded) or [eos]) for p in prompts]


def sampling_of(req: CompletionRequest) -> Sampling:
    """temperature 0 is greedy decoding (OpenAI's convention)."""
    if req.temperature == 0:
        return Sampling(repetition_penalty=req.repetition_penalty, stop_at_eos=not req.ignore_eos)
    return Sampling(True, req.temperature, req.top_k, req.top_p, req.repetition_penalty, req.seed,
                    not req.ignore_eos)


async def complete(server: Any, request: Any, engine: LMEngine, req: CompletionRequest,
                   include_usage: bool) -> Response:
    ids = prompt_ids(engine, req.prompts)
    rows = [i for i in range(len(ids)) for _ in range(req.n)]  # choice k answers prompt rows[k]
    head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": server.name}
    echo = [_echo_text(engine, p) if req.echo else "" for p in req.prompts]
    if req.stream:
        return _stream(server, request, engine, req, ids, rows, head, echo, include_usage)
    items = completion_items(engine, [ids[r] for r in rows], req.max_tokens, req.stop, sampling_of(req))
    results = await server.submit(items, request)
    return JSONResponse({**head, "choices": [
        {"text": echo[r] + res["text"], "index": k, "logprobs": None, "finish_reason": res["finish_reason"]}
        for k, (r, res) in enumerate(zip(rows, results))], "usage": _usage(server, ids, results)})


def _echo_text(engine: LMEngine, prompt: str | list[int]) -> str:
    return prompt if isinstance(prompt, str) else engine.tok.decode(prompt)


def _usage(server: Any, ids: list[list[int]], results: list[dict]) -> dict[str, int]:
    prompt = sum(len(x) for x in ids)
    generated = sum(len(r["tokens"]) for r in results)
    server.metrics.count_tokens(COMPLETE, inputs=prompt, generated=generated)
    return {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}


def _stream(server: Any, request: Any, engine: LMEngine, req: CompletionRequest, ids: list[list[int]],
            rows: list[int], head: dict, echo: list[str], include_usage: bool) -> Response:
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()

    def sender(k: int):
        return lambda text: loop.call_soon_threadsafe(events.put_nowait, (k, text))

    items = completion_items(engine, [ids[r] for r in rows], req.max_tokens, req.stop, sampling_of(req),
                             on_text=[sender(k) for k in range(len(rows))])
    ticket = Ticket(len(items), loop)
    server.enqueue(items, ticket, request)  # a full queue is a plain 503: the response has not started
    ticket.future.add_done_callback(lambda _: events.put_nowait(None))

    async def body() -> AsyncIterator[str]:
        try:
            for k, r in enumerate(rows):
                if echo[r]:
                    yield _event(head, k, echo[r], None)
            while (event := await events.get()) is not None:
                batch = [event]  # what else is already there goes out in the same write
                while not events.empty() and batch[-1] is not None:
                    batch.append(events.get_nowait())
                yield "".join(_event(head, k, text, None) for k, text in _merged(batch))
                if batch[-1] is None:
                    break
            if ticket.future.exception() is not None:
                err = ApiError(500, f"generation failed: {ticket.future.exception()}")
                yield f"data: {json.dumps(err.body())}\n\n"
                return
            results = ticket.future.result()
            for k, res in enumerate(results):
                yield _event(head, k, "", res["finish_reason"])
            usage = _usage(server, ids, results)
            if include_usage:
                yield f"data: {json.dumps({**head, 'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            ticket.cancelled = True  # finished, or the client went away: stop its rows

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _merged(events: list) -> list[tuple[int, str]]:
    """Consecutive text events of one choice joined (fewer, larger chunks under load)."""
    out: list[tuple[int, str]] = []
    for event in events:
        if event is None:
            continue
        if out and out[-1][0] == event[0]:
            out[-1] = (event[0], out[-1][1] + event[1])
        else:
            out.append(event)
    return out


def _event(head: dict, index: int, text: str, finish: str | None) -> str:
    chunk = {**head, "choices": [{"text": text, "index": index, "logprobs": None, "finish_reason": finish}]}
    return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
