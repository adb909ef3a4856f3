"""The router's HTTP answers that are not the runner's: JSON errors and SSE framing.

Every error the router itself produces has the body ``{"error": {"code", "message"}}``
(the shape OpenAI clients also read) and a stable ``code`` for programs. Handlers raise
``Rejection`` deep in a call and the outer handler returns its response. This module
does not decide which error applies.
"""

import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

REVISION_HEADER = "x-plnt-revision"
SSE_CONTENT_TYPE = "text/event-stream"


class Rejection(Exception):
    """Stop handling a call and answer with ``response``; ``close`` drops the connection
    right after it (the client's request was not read to its end)."""

    def __init__(self, response: web.Response, *, close: bool = False) -> None:
        super().__init__(response.status)
        self.response = response
        self.close = close


def json_response(
    payload: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(payload).encode(),
        content_type="application/json",
        headers=headers,
    )


def json_error(
    status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None
) -> web.Response:
    """An error answer; ``code`` is a stable snake_case token, ``message`` is for people."""
    return json_response(
        {"error": {"code": code, "message": message}}, status=status, headers=headers
    )


def reject(
    status: int,
    code: str,
    message: str,
    *,
    headers: Mapping[str, str] | None = None,
    close: bool = False,
) -> Rejection:
    """A ``Rejection`` carrying ``json_error(...)``; write ``raise reject(...)``."""
    return Rejection(json_error(status, code, message, headers=headers), close=close)


async def answer_and_close(request: web.Request, response: web.Response) -> web.Response:
    """Send ``response`` now, then close the connection.

    Without this aiohttp would keep reading the unread rest of the body for its lingering
    time (10 s) before closing: exactly what a stalled client must not get.
    """
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()  # the transport flushes what was written, then closes
    return response


def sse_event(data: str, *, event: str | None = None) -> bytes:
    """One Server-Sent Event; ``data`` must not contain newlines (JSON from json.dumps has none)."""
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {data}\n\n".encode()


def sse_error(code: str, message: str) -> bytes:
    """An ``error`` event for failures after a stream's status line was already sent."""
    return sse_event(json.dumps({"error": {"code": code, "message": message}}), event="error")


@web.middleware
async def json_http_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own 4xx/5xx answers (unknown path, wrong method) in the JSON error shape."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = (exc.reason or "error").lower().replace(" ", "_")
        message = f"{exc.reason}: {request.method} {request.path}"
        return json_error(
            exc.status,
            code,
            message,
            headers={k: v for k, v in exc.headers.items() if k.lower() == "allow"},
        )
