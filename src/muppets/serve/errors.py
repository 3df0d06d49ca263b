"""The one error type of the HTTP layer: a status, a message and OpenAI's error body."""

from __future__ import annotations

from typing import Any

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          405: "invalid_request_error", 413: "request_too_large", 415: "invalid_request_error",
          422: "invalid_request_error", 503: "overloaded_error"}


class ApiError(Exception):
    """A request the server answers with ``status`` and ``{"error": {...}}`` (OpenAI's shape).

    >>> ApiError(422, "input must be a string", param="input").body()["error"]["param"]
    'input'
    """

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        kind = _TYPES.get(self.status, "server_error" if self.status >= 500 else "invalid_request_error")
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}
