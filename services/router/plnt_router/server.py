"""The router's HTTP server: aiohttp's, with a deadline on request headers and JSON protocol errors.

aiohttp answers requests it cannot parse (a request line or header over its size limit, a
header flood, garbage) itself, in plain text, before any handler or middleware runs; and it
waits for the rest of a started request as long as the idle keep-alive allows. Its
extension point for both is the per-connection ``RequestHandler`` that ``web.Server``
creates, so ``GuardedAppRunner`` serves the app through ``GuardedServer``, whose
connections are ``GuardedRequestHandler``\\s:

- headers must be complete within ``header_timeout_s`` of a request's first byte, else the
  client gets 408 in the JSON error shape and the connection is closed (a slow or stalled
  client cannot hold it);
- every answer aiohttp makes up itself (``handle_error``) has the JSON error shape.

The body deadline is the pipeline's (it reads bodies); idle connections are closed after
aiohttp's ``keepalive_timeout``. Nothing here routes or knows about workflows.
"""

import asyncio
import json
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.streams import StreamReader

from plnt_common.logs import get_logger
from plnt_router.responses import json_error

log = get_logger(__name__)


def header_timeout_answer(timeout_s: float) -> bytes:
    """The raw 408 written when headers are late: no request exists yet to answer through."""
    message = f"request headers not received within {timeout_s:g}s"
    body = json.dumps({"error": {"code": "header_timeout", "message": message}}).encode()
    return (
        b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    )


class GuardedRequestHandler(web.RequestHandler):
    """aiohttp's connection protocol plus the header deadline and JSON error answers."""

    def __init__(self, manager: web.Server, *, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout_s = header_timeout_s
        self._header_timer: asyncio.TimerHandle | None = None
        self._body: StreamReader | None = None
        """The body of the last request parsed: until it is complete, bytes are body bytes."""

    def data_received(self, data: bytes) -> None:
        parsed = self._request_count
        super().data_received(data)
        if self._request_count != parsed:  # these bytes completed a request's headers
            # (the parser does not say whether more bytes followed them in this read, so a
            # request pipelined into the same read as the previous one starts no deadline:
            # it waits at most the keep-alive timeout)
            self._body = self._messages[-1][1] if self._messages else None
            self._stop_header_timer()
        elif data and self._header_timer is None and (self._body is None or self._body.is_eof()):
            # The first bytes of a request whose headers are not complete yet (aiohttp
            # also calls this with no bytes, to reparse what it buffered).
            self._header_timer = self._loop.call_later(
                self._header_timeout_s, self._headers_timed_out, parsed
            )

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_timed_out(self, parsed: int) -> None:
        self._header_timer = None
        if self._request_count != parsed or self.transport is None:
            return  # the headers completed meanwhile
        if self._request_in_progress:
            # A pipelined request's headers are late while an earlier answer is being
            # written: a 408 now would cut into it, so judge again after another period.
            self._header_timer = self._loop.call_later(
                self._header_timeout_s, self._headers_timed_out, parsed
            )
            return
        log.info("router.header_timeout", timeout_s=self._header_timeout_s)
        self.transport.write(header_timeout_answer(self._header_timeout_s))
        self.force_close()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """aiohttp's own error answer, in the router's JSON error shape; closes the connection.

        4xx are the client's doing: one line at debug (scanners and TLS probes are common),
        never a traceback. A 5xx is a bug and is logged with its traceback.
        """
        if request.writer.output_size > 0:
            # aiohttp's rule: part of an answer is out, another cannot follow
            raise ConnectionError("response already started, cannot send the error answer")
        code, text = self._describe(status, exc, message)
        if status >= 500:
            log.error("router.internal_error", status=status, exc_info=exc)
        else:
            log.debug("router.bad_request", status=status, code=code, reason=text)
        response = json_error(status, code, text)
        response.force_close()
        return response

    def _describe(
        self, status: int, exc: BaseException | None, message: str | None
    ) -> tuple[str, str]:
        if isinstance(exc, LineTooLong):
            return (
                "line_too_long",
                f"the request line or a header is longer than {self.max_field_size} bytes",
            )
        if isinstance(exc, BadHttpMessage) and "too many headers" in exc.message.lower():
            return "too_many_headers", f"the request has more than {self.max_headers} headers"
        if isinstance(exc, BadHttpMessage):
            first_line = exc.message.strip().splitlines()[0] if exc.message.strip() else ""
            return "bad_request", f"malformed HTTP request: {first_line[:200]}"
        if status == 504:
            return "timeout", "the router timed out handling this request"
        if status >= 500:
            return "internal_error", "the router failed to handle this request"
        return "bad_request", (message or "malformed HTTP request").splitlines()[0][:200]


class GuardedServer(web.Server):
    """``web.Server`` whose connections are ``GuardedRequestHandler``\\s."""

    def __init__(self, handler: Any, *, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._header_timeout_s = header_timeout_s

    def __call__(self) -> GuardedRequestHandler:
        return GuardedRequestHandler(
            self, loop=self._loop, header_timeout_s=self._header_timeout_s, **self._kwargs
        )


class GuardedAppRunner(web.AppRunner):
    """``web.AppRunner`` serving its app through a ``GuardedServer``.

    Keyword arguments are ``web.AppRunner``'s (``keepalive_timeout``, ``handler_cancellation``,
    ``shutdown_timeout``, ...).
    """

    def __init__(self, app: web.Application, *, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._header_timeout_s = header_timeout_s

    async def _make_server(self) -> web.Server:
        # The base builds the Server after starting the app; rebuild it as a GuardedServer
        # with the very same handler, request factory and settings.
        server = await super()._make_server()
        return GuardedServer(
            server.request_handler,
            request_factory=server.request_factory,
            handler_cancellation=server.handler_cancellation,
            header_timeout_s=self._header_timeout_s,
            **server._kwargs,
        )
