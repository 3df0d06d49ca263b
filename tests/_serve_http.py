"""A tiny HTTP client for the serve tests (standard library only)."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit


def request(url: str, method: str = "GET", body: Any = None, headers: dict | None = None,
            raw: bytes | None = None, timeout: float = 30.0) -> tuple[int, dict, Any]:
    """(status, headers, JSON body or text) of one request."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    try:
        conn.request(method, parts.path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        payload = resp.read()
        head = {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()
    text = payload.decode()
    return resp.status, head, json.loads(text) if head.get("content-type", "").startswith("application/json") else text


def post(url: str, body: Any = None, **kw) -> tuple[int, Any]:
    status, _, data = request(url, "POST", body, **kw)
    return status, data


def stream(url: str, body: dict, timeout: float = 30.0) -> list[Any]:
    """The server-sent events of a streamed request: decoded JSON chunks, then "[DONE]"."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("POST", parts.path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        assert resp.getheader("content-type").startswith("text/event-stream")
        events = []
        for line in resp:
            line = line.decode().strip()
            if line.startswith("data: "):
                data = line[len("data: "):]
                events.append(data if data == "[DONE]" else json.loads(data))
        return events
    finally:
        conn.close()
