"""``muppets serve`` under load, on loopback: throughput, latency percentiles, overload, memory.

A bounded load generator (asyncio, HTTP/1.1 keep-alive, standard library only) drives a server
started as a subprocess (``python -m muppets.cli serve``: ``muppets serve`` itself, on the malloc
that ``--malloc`` sets through ``$MUPPETS_MALLOC``; ``system`` is glibc's, as before 2026-11-28; the
script restarts itself on the same malloc, so that the in-process baselines below share it):

1. **Embeddings, closed loop.** ``C`` clients (concurrency 1, 4, 16, 64) each send one real
   SST-2 sentence per request to ``/v1/embeddings`` back to back for ``--duration`` seconds
   (after ``--warmup``): requests/s and p50/p95/p99 latency. Once with dynamic batching and once
   with ``--max-batch-size 1`` (batch-1 serving, the baseline: target >= 3x at concurrency 16).
2. **In-process baseline.** sentence-transformers ``encode`` of the same sentences
   (``--st-batch-size``), when it is importable: sentences/s (target: the server within 1.5x).
3. **Half of the peak, open loop.** Requests arrive at a constant rate of half the best
   closed-loop throughput (Poisson arrivals): p95 (target <= 50 ms).
4. **Overload, open loop.** Twice the peak rate for ``--overload-seconds``: every request ends
   as a 200, a 503 (queue full, with ``Retry-After``) or is *lost* (connection error or no answer
   within ``--timeout``: the target is none); the server's resident memory is sampled throughout
   (it must stay bounded) and, after the load stops, a recovery probe checks that single
   requests are answered again at unloaded latency.
5. **Generation** (with ``--gpt-model``): streamed ``/v1/completions`` at concurrency 1 and 8,
   ``--gen-tokens`` new tokens per request (greedy, ``ignore_eos``), new tokens/s and time to the
   first token, against the offline :func:`muppets.generate.generate` on the same prompts
   (one at a time, and 8 at once).

The client shares the machine with the server: on 2 cores, give the server ``--threads 2``
and read the figures as "server + client on 2 cores". Results go to ``--out`` (JSON) and a
Markdown summary is printed.

    python benchmarks/serve_load.py --model minilm --threads 2 --out benchmarks/results/serve_load.json
    python benchmarks/serve_load.py --model minilm --gpt-model runs/gpt-mini --out benchmarks/results/serve_load.json
    # smoke run (about a minute, numbers meaningless):
    python benchmarks/serve_load.py --smoke --out /tmp/serve_load.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"


# ----------------------------------------------------------------------------- HTTP client


class Connection:
    """One keep-alive HTTP/1.1 connection (Content-Length and chunked bodies)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(HOST, self.port)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except (ConnectionError, OSError):
                pass
            self.writer = None

    async def post(self, path: str, body: bytes, on_chunk=None) -> tuple[int, dict, bytes]:
        """(status, headers, body); ``on_chunk(bytes)`` sees a chunked body as it arrives."""
        if self.writer is None:
            await self.open()
        head = (f"POST {path} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        await self.writer.drain()
        status, headers = await self._head()
        if headers.get("transfer-encoding") == "chunked":
            data = await self._chunked(on_chunk)
        else:
            data = await self.reader.readexactly(int(headers.get("content-length", 0)))
        if headers.get("connection") == "close":
            await self.close()
        return status, headers, data

    async def _head(self) -> tuple[int, dict]:
        line = await self.reader.readline()
        if not line:
            raise ConnectionError("connection closed by the server")
        status = int(line.split()[1])
        headers = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        return status, headers

    async def _chunked(self, on_chunk) -> bytes:
        parts = []
        while True:
            size = int((await self.reader.readline()).split(b";")[0], 16)
            if size == 0:
                await self.reader.readline()
                return b"".join(parts)
            chunk = await self.reader.readexactly(size)
            await self.reader.readline()
            parts.append(chunk)
            if on_chunk is not None:
                on_chunk(chunk)


def percentiles(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {"p50_ms": float("nan"), "p95_ms": float("nan"), "p99_ms": float("nan")}
    xs = sorted(latencies)

    def q(p: float) -> float:
        return 1000 * xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]

    return {"p50_ms": round(q(0.50), 2), "p95_ms": round(q(0.95), 2), "p99_ms": round(q(0.99), 2)}


# ----------------------------------------------------------------------------- the server


@dataclass
class ServerProcess:
    """``python -m muppets.serve.cli MODEL …`` on a free port; RSS sampled from /proc."""

    model: str
    options: list[str] = field(default_factory=list)
    threads: int = 2
    malloc: str = "auto"  # $MUPPETS_MALLOC of the server (muppets.malloc)
    port: int = 0
    proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120.0) -> "ServerProcess":
        with socket.socket() as s:
            s.bind((HOST, 0))
            self.port = s.getsockname()[1]
        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads),
               "MUPPETS_MALLOC": self.malloc}
        env.pop("LD_PRELOAD", None)
        cmd = [sys.executable, "-m", "muppets.cli", "serve", self.model, "--host", HOST, "--port", str(self.port),
               "--threads", str(self.threads), "--log-level", "warning", *self.options]
        self.proc = subprocess.Popen(cmd, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {' '.join(cmd)}")
            try:
                with socket.create_connection((HOST, self.port), timeout=0.5) as s:
                    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if b" 200 " in s.recv(200):
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server did not become healthy")

    def rss_mb(self) -> float:
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def stop(self) -> int:
        """SIGTERM (graceful shutdown); the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


# ----------------------------------------------------------------------------- load


def embedding_body(sentence: str) -> bytes:
    return json.dumps({"input": sentence}).encode()


async def closed_loop(port: int, bodies: list[bytes], concurrency: int, duration: float,
                      warmup: float, path: str = "/v1/embeddings") -> dict:
    """``concurrency`` clients, back to back; statistics of the requests after ``warmup``."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    errors = 0
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + duration

    async def client(k: int) -> None:
        nonlocal errors
        conn, i = Connection(port), k
        while (t0 := time.perf_counter()) < stop_at:
            try:
                status, _, _ = await conn.post(path, bodies[i % len(bodies)])
            except (ConnectionError, OSError, asyncio.IncompleteReadError):
                errors += 1
                await conn.close()
                continue
            i += concurrency
            if t0 >= measure_from:
                latencies.append(time.perf_counter() - t0)
                statuses[status] = statuses.get(status, 0) + 1
        await conn.close()

    await asyncio.gather(*(client(k) for k in range(concurrency)))
    ok = statuses.get(200, 0)
    return {"concurrency": concurrency, "requests": len(latencies), "ok": ok, "statuses": statuses, "errors": errors,
            "throughput_rps": round(ok / duration, 2), **percentiles(latencies)}


async def open_loop(port: int, bodies: list[bytes], rate: float, duration: float, timeout: float,
                    max_outstanding: int = 4096, sampler=None) -> dict:
    """Poisson arrivals at ``rate``/s for ``duration`` s, a fresh connection each: every request is
    counted as 200, 503, another status, or lost (error / no answer within ``timeout``)."""
    rng = random.Random(0)
    counts = {"200": 0, "503": 0, "other": 0, "lost": 0, "not_sent": 0}
    latencies: list[float] = []
    outstanding: set[asyncio.Task] = set()

    async def one(body: bytes) -> None:
        conn, t0 = Connection(port), time.perf_counter()
        try:
            status, _, _ = await asyncio.wait_for(conn.post("/v1/embeddings", body), timeout)
            key = str(status) if status in (200, 503) else "other"
            counts[key] += 1
            if status == 200:
                latencies.append(time.perf_counter() - t0)
        except (asyncio.TimeoutError, ConnectionError, OSError, asyncio.IncompleteReadError, ValueError):
            counts["lost"] += 1
        finally:
            await conn.close()

    start, t, i = time.perf_counter(), 0.0, 0
    while t < duration:
        t += rng.expovariate(rate)
        await asyncio.sleep(max(0.0, start + t - time.perf_counter()))
        if len(outstanding) >= max_outstanding:
            counts["not_sent"] += 1  # the client's own bound: reported, never silently dropped
            continue
        task = asyncio.ensure_future(one(bodies[i % len(bodies)]))
        outstanding.add(task)
        task.add_done_callback(outstanding.discard)
        i += 1
        if sampler is not None:
            sampler()
    await asyncio.gather(*outstanding)
    sent = i
    return {"rate_rps": round(rate, 2), "duration_s": duration, "sent": sent, **counts,
            "answered": counts["200"] + counts["503"] + counts["other"], **percentiles(latencies)}


# ----------------------------------------------------------------------------- phases


def sst2_sentences(limit: int) -> list[str]:
    try:
        from muppets.tasks import load_task

        data = load_task("sst2")
        texts = [ex.text for split in ("dev", "train") for ex in data[split]]
    except Exception as err:  # noqa: BLE001 - a benchmark without the shared data still runs
        print(f"SST-2 not available ({err}); using built-in sentences", file=sys.stderr)
        texts = ["a gripping , funny and finally transporting film .", "the film is strictly routine .",
                 "one long string of cliches .", "too bad .", "a slick , engrossing melodrama ."]
    return texts[:limit]


def embedding_phase(args, sentences: list[str], options: list[str], label: str) -> dict:
    server = ServerProcess(args.model, options, args.threads, args.malloc).start()
    bodies = [embedding_body(s) for s in sentences]
    levels = []
    try:
        rss = [server.rss_mb()]
        for c in args.concurrency:
            result = asyncio.run(closed_loop(server.port, bodies, c, args.duration, args.warmup))
            rss.append(server.rss_mb())
            print(f"[{label}] concurrency {c}: {result['throughput_rps']} req/s, p50 {result['p50_ms']} ms, "
                  f"p95 {result['p95_ms']} ms, p99 {result['p99_ms']} ms", file=sys.stderr)
            levels.append(result)
    finally:
        code = server.stop()
    return {"label": label, "server_options": options, "levels": levels, "rss_mb_max": round(max(rss), 1),
            "exit_code": code}


def st_baseline(args, sentences: list[str]) -> dict | None:
    try:
        import torch
        from sentence_transformers import SentenceTransformer

        from muppets.paths import resolve_model_path
    except ImportError as err:
        print(f"sentence-transformers baseline skipped: {err}", file=sys.stderr)
        return None
    torch.set_num_threads(args.threads)
    model = SentenceTransformer(str(resolve_model_path(args.model)), device="cpu")
    model.encode(sentences[:64], batch_size=args.st_batch_size)  # warm up
    n = min(len(sentences), max(64, int(args.st_sentences)))
    t0 = time.perf_counter()
    model.encode(sentences[:n], batch_size=args.st_batch_size)
    seconds = time.perf_counter() - t0
    return {"sentences": n, "batch_size": args.st_batch_size, "seconds": round(seconds, 3),
            "throughput_sps": round(n / seconds, 2), "threads": args.threads}


def engine_ceiling(args, sentences: list[str], n: int = 512, batch: int = 64) -> dict:
    """The served model's own forward passes in this process (no HTTP, no queue): sentences/s
    at batch 1, 16 and ``batch`` in arrival order. Their ratio bounds what any batching
    server can gain over batch-1 serving on this machine."""
    import numpy as np
    import torch

    from muppets.serve.config import ServeConfig
    from muppets.serve.engines import load_engine

    torch.set_num_threads(args.threads)
    engine = load_engine(ServeConfig(model_dir=args.model, threads=args.threads, backend="torch",
                                     precision=args.precision))
    rows = [w.payload for w in engine.embedding_items(sentences[:n], True)]
    out = {"precision": args.precision}
    if args.precision != "float32":  # how far the served vectors are from float32 ones
        reference = load_engine(ServeConfig(model_dir=args.model, threads=args.threads, backend="torch"))
        a = torch.tensor(np.stack(engine.embed_rows(rows)))
        b = torch.tensor(np.stack(reference.embed_rows(rows)))
        cos = torch.nn.functional.cosine_similarity(a, b, dim=-1)  # (n,)
        out["cosine_to_float32"] = {"min": round(cos.min().item(), 7), "mean": round(cos.mean().item(), 7),
                                    "sentences": len(rows)}
        del reference
    for size in (1, 16, batch):  # 16: the largest batch a closed loop of 16 clients can form
        engine.embed_rows(rows[:size])  # warm up
        t0 = time.perf_counter()
        for start in range(0, len(rows), size):
            engine.embed_rows(rows[start:start + size])
        out[f"batch_{size}_sps"] = round(len(rows) / (time.perf_counter() - t0), 2)
    out["ratio"] = round(out[f"batch_{batch}_sps"] / out["batch_1_sps"], 3)
    out["ratio_16"] = round(out["batch_16_sps"] / out["batch_1_sps"], 3)
    print(f"[engine in-process] {out}", file=sys.stderr)
    return out


def overload_phase(args, sentences: list[str], peak: float) -> dict:
    server = ServerProcess(args.model, args.server_options, args.threads, args.malloc).start()
    bodies = [embedding_body(s) for s in sentences]
    rss: list[float] = [server.rss_mb()]
    timeline: list[tuple[float, float]] = []  # (seconds into the overload, RSS MB)
    last = [0.0]

    def sample() -> None:
        if time.perf_counter() - last[0] > 0.25:
            rss.append(server.rss_mb())
            last[0] = time.perf_counter()
            timeline.append((last[0], rss[-1]))

    try:
        half = asyncio.run(open_loop(server.port, bodies, peak / 2, args.half_seconds, args.timeout))
        print(f"[half peak {peak / 2:.1f}/s] p95 {half['p95_ms']} ms, {half}", file=sys.stderr)
        rss_before = server.rss_mb()
        timeline.clear()
        over = asyncio.run(open_loop(server.port, bodies, 2 * peak, args.overload_seconds, args.timeout,
                                     sampler=sample))
        rss.append(server.rss_mb())
        print(f"[overload {2 * peak:.1f}/s] {over}", file=sys.stderr)
        time.sleep(1.0)
        recovery = asyncio.run(closed_loop(server.port, bodies, 1, args.recovery_seconds, 0.5))
        print(f"[recovery] {recovery}", file=sys.stderr)
    finally:
        code = server.stop()
    return {"half_peak": half, "overload": over, "recovery": recovery, "rss_mb_before_overload": round(rss_before, 1),
            "rss_mb_max_during_overload": round(max(rss), 1), "rss_samples": len(rss),
            "rss_mb_max_by_quarter": quarter_maxima(timeline), "exit_code": code}


def quarter_maxima(timeline: list[tuple[float, float]]) -> list[float]:
    """The largest RSS in each quarter of the overload (bounded memory: the last quarters stop
    growing)."""
    if not timeline:
        return []
    t0, t1 = timeline[0][0], timeline[-1][0]
    span = max(t1 - t0, 1e-9)
    quarters: list[list[float]] = [[], [], [], []]
    for t, mb in timeline:
        quarters[min(3, int(4 * (t - t0) / span))].append(mb)
    return [round(max(q), 1) if q else float("nan") for q in quarters]


# ----------------------------------------------------------------------------- generation


def gpt_dir(spec: str, sentences: list[str]) -> str:
    """``random:PRESET`` builds random weights (speed does not depend on them) and a BPE trained
    on the sentences; anything else is a model directory or run."""
    if not spec.startswith("random:"):
        return spec
    import torch

    from muppets.interop.hf_gpt import save_hf_gpt
    from muppets.models.gpt import GPTConfig, GPTLanguageModel
    from muppets.tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer.train(sentences, vocab_size=2000, min_frequency=1)
    torch.manual_seed(0)
    cfg = GPTConfig.preset(spec.split(":", 1)[1], vocab_size=tok.vocab_size, eos_token_id=tok.eos_id)
    out = Path(tempfile.mkdtemp(prefix="serve-load-gpt-"))
    save_hf_gpt(GPTLanguageModel(cfg), out, tok)
    return str(out)


async def stream_clients(port: int, prompts: list[str], concurrency: int, tokens: int, requests: int) -> dict:
    """``concurrency`` clients streaming ``requests`` completions in all."""
    firsts, totals, generated = [], [], 0
    queue = list(range(requests))

    async def client() -> None:
        nonlocal generated
        conn = Connection(port)
        while queue:
            i = queue.pop()
            body = json.dumps({"prompt": prompts[i % len(prompts)], "max_tokens": tokens, "temperature": 0,
                               "ignore_eos": True, "stream": True,
                               "stream_options": {"include_usage": True}}).encode()
            t0, first = time.perf_counter(), []

            def on_chunk(chunk: bytes) -> None:
                if not first and b'"text": "' in chunk and b'"text": ""' not in chunk:
                    first.append(time.perf_counter() - t0)

            _, _, data = await conn.post("/v1/completions", body, on_chunk)
            totals.append(time.perf_counter() - t0)
            firsts.extend(first[:1])
            usage = [json.loads(e[6:]) for e in data.decode().split("\n\n") if e.startswith("data: {") and '"usage"' in e]
            generated += usage[-1]["usage"]["completion_tokens"] if usage else 0
        await conn.close()

    warm = Connection(port)  # one unmeasured request first
    await warm.post("/v1/completions", json.dumps({"prompt": prompts[0], "max_tokens": tokens}).encode())
    await warm.close()
    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    seconds = time.perf_counter() - t0
    return {"concurrency": concurrency, "requests": requests, "new_tokens": generated, "seconds": round(seconds, 3),
            "tokens_per_s": round(generated / seconds, 1), "ttft": percentiles(firsts), "latency": percentiles(totals)}


def offline_generation(model_dir: str, prompts: list[str], tokens: int, batch: int, requests: int,
                       threads: int) -> dict:
    import torch

    from muppets.generate import GenerationConfig, generate
    from muppets.interop.hf_gpt import load_hf_gpt
    from muppets.tokenizers import ByteLevelBPETokenizer
    from muppets.transfer.embedders import locate_model

    torch.set_num_threads(threads)
    _, path = locate_model(model_dir)
    model, tok = load_hf_gpt(path).eval(), ByteLevelBPETokenizer.load(path)
    cfg = GenerationConfig(max_new_tokens=tokens, stop_at_eos=False)
    ids = [tok.encode(prompts[i % len(prompts)]) for i in range(requests)]
    generate(model, ids[:batch], cfg)  # warm up
    t0, generated = time.perf_counter(), 0
    for start in range(0, requests, batch):
        generated += sum(len(t) for t in generate(model, ids[start:start + batch], cfg))
    seconds = time.perf_counter() - t0
    return {"batch": batch, "requests": requests, "new_tokens": generated, "seconds": round(seconds, 3),
            "tokens_per_s": round(generated / seconds, 1)}


def generation_phase(args, sentences: list[str]) -> dict:
    model_dir = gpt_dir(args.gpt_model, sentences)
    prompts = [" ".join(s.split()[:8]) for s in sentences]
    server = ServerProcess(model_dir, ["--max-new-tokens", str(args.gen_tokens)], args.threads, args.malloc).start()
    served = []
    try:
        for c in args.gen_concurrency:
            result = asyncio.run(stream_clients(server.port, prompts, c, args.gen_tokens, args.gen_requests))
            print(f"[generate served c={c}] {result}", file=sys.stderr)
            served.append(result)
    finally:
        code = server.stop()
    offline = [offline_generation(model_dir, prompts, args.gen_tokens, c, args.gen_requests, args.threads)
               for c in args.gen_concurrency]
    return {"model": args.gpt_model, "served": served, "offline": offline, "exit_code": code}


# ----------------------------------------------------------------------------- main


def summary(results: dict) -> str:
    lines = ["| setting | concurrency | req/s | p50 ms | p95 ms | p99 ms |", "|---|---|---|---|---|---|"]
    for phase in results["embeddings"]:
        for lv in phase["levels"]:
            lines.append(f"| {phase['label']} | {lv['concurrency']} | {lv['throughput_rps']} | {lv['p50_ms']} | "
                         f"{lv['p95_ms']} | {lv['p99_ms']} |")
    if results.get("sentence_transformers"):
        lines.append(f"\nsentence-transformers in-process: {results['sentence_transformers']['throughput_sps']} sentences/s")
    if results.get("engine_ceiling"):
        e = results["engine_ceiling"]
        lines.append(f"engine in-process (no server, {e.get('precision', 'float32')}): batch 1 {e['batch_1_sps']} / "
                     f"16 {e['batch_16_sps']} / 64 {e['batch_64_sps']} sentences/s = {e['ratio_16']}x / {e['ratio']}x"
                     + (f"; cosine to float32 min {e['cosine_to_float32']['min']}" if "cosine_to_float32" in e else ""))
    if results.get("overload"):
        o = results["overload"]
        lines.append(f"half peak: p95 {o['half_peak']['p95_ms']} ms; overload: {json.dumps(o['overload'])}; "
                     f"RSS {o['rss_mb_before_overload']} -> max {o['rss_mb_max_during_overload']} MB "
                     f"(max per quarter {o.get('rss_mb_max_by_quarter')}); "
                     f"recovery p50 {o['recovery']['p50_ms']} ms")
    if results.get("generation"):
        g = results["generation"]
        for s, off in zip(g["served"], g["offline"]):
            lines.append(f"generation c={s['concurrency']}: served {s['tokens_per_s']} tok/s "
                         f"(TTFT p50 {s['ttft']['p50_ms']} ms) vs offline batch {off['batch']} {off['tokens_per_s']} tok/s")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="minilm", help="embedding model served (default: minilm)")
    p.add_argument("--threads", type=int, default=2, help="torch threads of the server and the baselines")
    p.add_argument("--malloc", default="auto", help="the server's $MUPPETS_MALLOC (auto, tcmalloc, system, …); "
                   "the figures recorded before 2026-11-28 are system's")
    p.add_argument("--concurrency", default="1,4,16,64", help="closed-loop client counts")
    p.add_argument("--duration", type=float, default=20.0, help="measured seconds per concurrency level")
    p.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds before each level")
    p.add_argument("--precision", choices=["float32", "bf16"], default="float32",
                   help="the server's --precision (both servers) and the engine phase's")
    p.add_argument("--max-batch-tokens", type=int, default=8192)
    p.add_argument("--max-wait-ms", type=float, default=5.0)
    p.add_argument("--queue-size", type=int, default=256)
    p.add_argument("--sentences", type=int, default=2000, help="SST-2 sentences cycled through")
    p.add_argument("--no-batch1", action="store_true", help="skip the batch-1 serving baseline")
    p.add_argument("--st-batch-size", type=int, default=32)
    p.add_argument("--st-sentences", type=int, default=2000)
    p.add_argument("--half-seconds", type=float, default=20.0)
    p.add_argument("--overload-seconds", type=float, default=20.0)
    p.add_argument("--recovery-seconds", type=float, default=5.0)
    p.add_argument("--timeout", type=float, default=30.0, help="an open-loop request unanswered by then is lost")
    p.add_argument("--gpt-model", default="", help="GPT directory/run, or random:gpt-mini (random weights)")
    p.add_argument("--gen-tokens", type=int, default=64)
    p.add_argument("--gen-concurrency", default="1,8")
    p.add_argument("--gen-requests", type=int, default=32)
    p.add_argument("--engine-only", action="store_true",
                   help="only the in-process forward passes at batch 1 and 64 (the ceiling of batching)")
    p.add_argument("--smoke", action="store_true", help="tiny settings: checks the script, not the server's speed")
    p.add_argument("--out", default="", help="write the results here (JSON)")
    args = p.parse_args(argv)
    if args.smoke:
        args.concurrency, args.duration, args.warmup, args.sentences = "1,4", 1.5, 0.3, 200
        args.st_sentences, args.half_seconds, args.overload_seconds, args.recovery_seconds = 64, 2.0, 2.0, 1.0
        args.gpt_model = args.gpt_model or "random:gpt-tiny"
        args.gen_tokens, args.gen_requests, args.gen_concurrency = 8, 4, "1,2"
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.gen_concurrency = [int(c) for c in args.gen_concurrency.split(",")]
    args.server_options = ["--max-batch-tokens", str(args.max_batch_tokens), "--max-wait-ms", str(args.max_wait_ms),
                           "--queue-size", str(args.queue_size), "--precision", args.precision]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if argv is None:  # the in-process baselines on the server's malloc too: this script restarts on it
        from muppets.malloc import use_malloc

        os.environ["MUPPETS_MALLOC"] = args.malloc
        use_malloc()
    sentences = sst2_sentences(args.sentences)
    results: dict = {"command": " ".join(sys.argv), "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                                                 "platform": platform.platform()},
                     "settings": {k: v for k, v in vars(args).items() if k != "server_options"}, "embeddings": []}
    if not args.engine_only:
        results["embeddings"].append(embedding_phase(args, sentences, args.server_options, "dynamic batching"))
    if not args.no_batch1 and not args.engine_only:
        results["embeddings"].append(embedding_phase(args, sentences, [*args.server_options, "--max-batch-size", "1"],
                                                     "batch-1 serving"))
    results["sentence_transformers"] = None if args.engine_only else st_baseline(args, sentences)
    results["engine_ceiling"] = engine_ceiling(args, sentences)
    if args.engine_only:
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(results, indent=1))
        print(json.dumps(results["engine_ceiling"]))
        return 0
    peak = max(lv["throughput_rps"] for lv in results["embeddings"][0]["levels"])
    results["overload"] = overload_phase(args, sentences, peak)
    if args.gpt_model:
        results["generation"] = generation_phase(args, sentences)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1))
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
