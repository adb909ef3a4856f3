"""The fast backend every router figure is measured against: raw asyncio, no framework.

``python -m bench.backends --serve PORT=REVISION [--serve PORT=REVISION ...]`` listens on
each loopback port and answers any POST with a small JSON body and ``x-plnt-revision``
(the revision of that port), on kept-alive HTTP/1.1 connections:

- ``Accept: text/event-stream``: an SSE stream, the first event at once, a second one
  ``SSE_GAP_S`` later, then the end. Time to first chunk is measured on it, and the gap
  shows whether a proxy buffers (a buffering proxy delivers both events together).
- a body containing ``"delay_ms": N``: the JSON answer after N ms (a slow runner, for the
  concurrency-limit check).
- ``GET /stats``: connections accepted and requests answered, so the harness can show
  that a proxy reuses its upstream connections.

It is as cheap per request as Python allows, so the proxy in front of it dominates
what is measured. It is not a runner and implements no workflow.
"""

import argparse
import asyncio
import contextlib
import functools
import json

SSE_GAP_S = 0.010
SPEND_HEADERS = "x-plnt-tokens: 120,40\r\nx-plnt-cost-usd: 4.2e-05\r\n"
_STATS = {"connections": 0, "requests": 0}


def _head(status: str, revision: str, content_type: str, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n"
        f"x-plnt-revision: {revision}\r\n{extra}"
    ).encode()


class _Backend(asyncio.Protocol):
    """One connection: parses requests (Content-Length bodies only) and answers them."""

    def __init__(self, revision: str) -> None:
        self._revision = revision
        body = json.dumps({"output": {"text": "ok"}, "reply": "ok", "revision": revision}).encode()
        self._json = (
            # With a runner's spend headers, so the router's figures are measured as served.
            _head("200 OK", revision, "application/json", SPEND_HEADERS)
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        self._sse_head = _head(
            "200 OK",
            revision,
            "text/event-stream",
            "cache-control: no-cache\r\nx-accel-buffering: no\r\n"
            "transfer-encoding: chunked\r\n\r\n",
        )
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        _STATS["connections"] += 1

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._drain()

    def _drain(self) -> None:
        while not self._busy:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self._buffer[:end]).decode("latin-1")
            lines = head.split("\r\n")
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            if len(self._buffer) < end + 4 + length:
                return
            body = bytes(self._buffer[end + 4 : end + 4 + length])
            del self._buffer[: end + 4 + length]
            _STATS["requests"] += 1
            self._answer(lines[0], headers, body)

    def _answer(self, request_line: str, headers: dict[str, str], body: bytes) -> None:
        assert self._transport is not None
        if request_line.startswith("GET /stats"):
            payload = json.dumps(_STATS).encode()
            self._transport.write(
                _head("200 OK", self._revision, "application/json")
                + f"content-length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
        elif "text/event-stream" in headers.get("accept", ""):
            self._sse()
        elif b"delay_ms" in body:
            delay_s = float(json.loads(body).get("delay_ms", 0)) / 1000
            self._busy = True
            asyncio.get_running_loop().call_later(delay_s, self._delayed)
        else:
            self._transport.write(self._json)

    def _delayed(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(self._json)
        self._busy = False
        self._drain()

    def _sse(self) -> None:
        assert self._transport is not None
        self._busy = True
        self._transport.write(self._sse_head)
        self._transport.write(_chunk(b'event: step\ndata: {"step": 1}\n\n'))
        asyncio.get_running_loop().call_later(SSE_GAP_S, self._sse_end)

    def _sse_end(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(_chunk(b'event: result\ndata: {"step": 2}\n\n') + b"0\r\n\r\n")
        self._busy = False
        self._drain()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def serve(listen: list[tuple[int, str]]) -> None:
    loop = asyncio.get_running_loop()
    for port, revision in listen:
        await loop.create_server(
            functools.partial(_Backend, revision), "127.0.0.1", port, backlog=1024
        )
    print(f"listening on http://127.0.0.1:{listen[0][0]}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.backends")
    parser.add_argument("--serve", action="append", required=True, metavar="PORT=REVISION")
    args = parser.parse_args()
    listen = []
    for spec in args.serve:
        port, _, revision = spec.partition("=")
        listen.append((int(port), revision or "r1"))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(listen))


if __name__ == "__main__":
    main()
