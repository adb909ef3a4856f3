"""A small HTTP/1.1 load generator on raw asyncio: open-loop pacing, closed-loop bursts, SSE.

It is deliberately lighter than any HTTP client library, so the figures are the
server's and not the client's: each connection is an ``asyncio.Protocol`` that writes
pre-built request bytes and parses the answer (``Content-Length`` or chunked) by hand.
Connections are kept alive and reused; a new one is opened only when every open one is
busy. Latency is taken from the moment the request is written to the moment its last
byte arrives (``first_body`` also records when the first body byte arrived, which is
time to first chunk for SSE).

- ``paced``: an open-loop generator at a fixed rate (the schedule does not wait for
  answers), for latency at 500 requests/s.
- ``burst``: ``total`` requests with ``concurrency`` in flight, for counting headers.
It is not a throughput tool (wrk is).
"""

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass(slots=True)
class Reply:
    """One answer: status, lower-cased headers, body and when its parts arrived."""

    status: int
    headers: dict[str, str]
    body: bytes
    sent: float
    first_body: float
    done: float

    @property
    def latency(self) -> float:
        return self.done - self.sent

    @property
    def first_chunk(self) -> float:
        return self.first_body - self.sent


@dataclass(frozen=True)
class Target:
    """Where requests go and the exact bytes of one request."""

    host: str
    port: int
    request: bytes

    @classmethod
    def post(cls, url: str, body: bytes, *, headers: Mapping[str, str] | None = None) -> "Target":
        parts = urlsplit(url)
        lines = [
            f"POST {parts.path or '/'} HTTP/1.1",
            f"host: {parts.hostname}:{parts.port}",
            "content-type: application/json",
            f"content-length: {len(body)}",
            *(f"{k}: {v}" for k, v in (headers or {}).items()),
        ]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
        return cls(host=parts.hostname or "127.0.0.1", port=parts.port or 80, request=request)

    @classmethod
    def get(cls, url: str) -> "Target":
        parts = urlsplit(url)
        request = f"GET {parts.path or '/'} HTTP/1.1\r\nhost: {parts.hostname}:{parts.port}\r\n\r\n"
        return cls(parts.hostname or "127.0.0.1", parts.port or 80, request.encode())


class _Client(asyncio.Protocol):
    """One kept-alive connection, one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[Reply] | None = None
        self._reset()

    def _reset(self) -> None:
        self._status = 0
        self._headers: dict[str, str] = {}
        self._in_body = False
        self._length = -1
        self._chunked = False
        self._body = bytearray()
        self._first_body = 0.0
        self._sent = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc or ConnectionResetError("server closed the connection"))

    def send(self, request: bytes) -> "asyncio.Future[Reply]":
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._reset()
        self._sent = time.perf_counter()
        self.transport.write(request)
        return self._waiter

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        self._buffer += data
        if not self._in_body:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
            del self._buffer[: end + 4]
            self._status = int(lines[0].split(" ", 2)[1])
            for line in lines[1:]:
                name, _, value = line.partition(":")
                self._headers[name.strip().lower()] = value.strip()
            self._in_body = True
            self._chunked = "chunked" in self._headers.get("transfer-encoding", "")
            self._length = int(self._headers.get("content-length", "-1"))
        if self._buffer and not self._first_body:
            self._first_body = now
        if self._chunked:
            self._read_chunks(now)
        elif len(self._buffer) >= self._length >= 0:
            self._body += self._buffer[: self._length]
            del self._buffer[: self._length]
            self._finish(now)

    def _read_chunks(self, now: float) -> None:
        while True:
            line_end = self._buffer.find(b"\r\n")
            if line_end < 0:
                return
            size = int(bytes(self._buffer[:line_end]).split(b";")[0], 16)
            if len(self._buffer) < line_end + 2 + size + 2:
                return
            self._body += self._buffer[line_end + 2 : line_end + 2 + size]
            del self._buffer[: line_end + 2 + size + 2]
            if size == 0:
                self._finish(now)
                return

    def _finish(self, now: float) -> None:
        reply = Reply(
            status=self._status,
            headers=self._headers,
            body=bytes(self._body),
            sent=self._sent,
            first_body=self._first_body or now,
            done=now,
        )
        if self._headers.get("connection", "").lower() == "close" and self.transport:
            self.transport.close()
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(reply)


@dataclass
class Pool:
    """Kept-alive connections to one host:port; opens one more only when all are busy."""

    host: str
    port: int
    idle: list[_Client] = field(default_factory=list)
    opened: int = 0

    async def request(self, payload: bytes) -> Reply:
        client = None
        while self.idle:
            candidate = self.idle.pop()
            if candidate.transport is not None:
                client = candidate
                break
        if client is None:
            loop = asyncio.get_running_loop()
            _, client = await loop.create_connection(_Client, self.host, self.port)
            self.opened += 1
        reply = await client.send(payload)
        if client.transport is not None:
            self.idle.append(client)
        return reply

    def close(self) -> None:
        for client in self.idle:
            if client.transport is not None:
                client.transport.close()
        self.idle.clear()


async def paced(target: Target, *, rate: float, seconds: float, warmup_s: float) -> list[Reply]:
    """Open loop: one request every ``1/rate`` s for ``warmup_s + seconds``; the warm-up's
    replies are dropped. A request that fails raises (a benchmark must not hide errors)."""
    loop = asyncio.get_running_loop()
    pool = Pool(target.host, target.port)
    interval = 1.0 / rate
    total = int((warmup_s + seconds) * rate)
    skip = int(warmup_s * rate)
    start = loop.time() + 0.05
    tasks = []
    try:
        for index in range(total):
            delay = start + index * interval - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(pool.request(target.request)))
        replies = await asyncio.gather(*tasks)
    finally:
        pool.close()
    return list(replies[skip:])


async def burst(target: Target, *, total: int, concurrency: int) -> list[Reply]:
    """``total`` requests with ``concurrency`` of them in flight at any time."""
    pool = Pool(target.host, target.port)
    replies: list[Reply] = []
    remaining = total

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            replies.append(await pool.request(target.request))

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        pool.close()
    return replies


async def sequential(target: Target, *, count: int, warmup: int) -> list[Reply]:
    """``count`` requests one after the other on one kept-alive connection."""
    pool = Pool(target.host, target.port)
    replies = []
    try:
        for index in range(warmup + count):
            reply = await pool.request(target.request)
            if index >= warmup:
                replies.append(reply)
    finally:
        pool.close()
    return replies
