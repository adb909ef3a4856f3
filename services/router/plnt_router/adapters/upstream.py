"""The pooled HTTP/1.1 client the router talks to runners with: kept-alive connections.

``RunnerClient.post`` sends a call to a runner's ``/invoke`` and returns as soon as the
answer's status line and headers are in; the caller then reads the body whole or streams
it piece by piece as it arrives. Failures are raised as ``UpstreamTimeout`` and
``UpstreamUnavailable`` here, so nothing above this module sees socket errors. It does
not retry, pick runners or build responses.

Why not aiohttp's ``ClientSession``: profiling the router at saturation showed the client
side of each call (request object, auto headers, payload wrapper, tracing hooks, timer
context) costing about as much CPU as the whole server side. A runner call needs none of
that: one POST with a handful of known headers on a kept-alive connection. So each
connection is an ``asyncio.Protocol`` that writes the request in one ``write`` and parses
the answer itself (Content-Length, chunked, or until close). What aiohttp's client did
for the router and this module keeps: a bounded pool with LIFO reuse and an idle
keep-alive limit, connect errors told apart from mid-call failures, a whole-answer
timeout for JSON and a between-chunks timeout for streams, and read back-pressure.
"""

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import cast
from urllib.parse import urlsplit

from plnt_router.errors import UpstreamTimeout, UpstreamUnavailable

# Below the runners' (aiohttp's default 75 s) server-side keep-alive, so the router drops an
# idle connection before the runner does and never writes a request into a closing socket.
KEEPALIVE_S = 30.0
MAX_HEAD_BYTES = 64 * 1024
"""Largest status line plus headers accepted from a runner."""
HIGH_WATER_BYTES = 256 * 1024
"""A streamed body buffered beyond this pauses reading from the runner until consumed."""
NO_BODY_STATUSES = frozenset({204, 304})


class _Endpoint:
    """A runner base URL split once: where to connect and what the request line says."""

    __slots__ = ("host", "key", "path", "port", "request_prefix", "tls")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.key = (parts.scheme, self.host, self.port)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.request_prefix = f"POST {self.path} HTTP/1.1\r\nHost: {host}:{self.port}\r\n".encode()


class _Connection(asyncio.Protocol):
    """One kept-alive connection to a runner, carrying one exchange at a time.

    The parser fills ``_pieces`` with body bytes as they arrive and resolves ``_waiter``
    whenever there is something new (the head, a piece, the end, or an error).
    """

    def __init__(self, client: "RunnerClient", key: tuple[str, str, int]) -> None:
        self._client = client
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.idle_since = 0.0
        self._buffer = bytearray()
        self._waiter: asyncio.Future[None] | None = None
        self._loop = asyncio.get_running_loop()
        self.deadline = 0.0
        """Loop time by which the exchange must be complete; 0 when unbounded (see ``sweep``)."""
        self._active = False
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head_done = False
        self.done = False
        self.keep_alive = True
        self.error: BaseException | None = None
        self._pieces: deque[bytes] = deque()
        self._buffered = 0
        self._remaining = 0  # Content-Length left, or bytes left in the current chunk
        self._framing = ""  # "length", "chunked", "eof"
        self._chunk_state = "size"  # "size", "data", "crlf", "trailer"
        self._paused = False

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (uvloop's does not subclass asyncio.Transport: no isinstance)
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if not self._active:
            # Bytes nobody asked for: the connection's framing cannot be trusted any more.
            self.abort()
            return
        self._buffer += data
        try:
            self._parse()
        except ValueError as exc:
            self._fail(ConnectionError(f"invalid HTTP answer: {exc}"))
            self.abort()
            return
        self._wake()

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost finishes the exchange

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._active and not self.done:
            if self.head_done and self._framing == "eof":
                self._finish()
            else:
                self._fail(exc or ConnectionResetError("the runner closed the connection"))
        self._wake()
        self._client._connection_closed(self)

    # -- exchange ----------------------------------------------------------------------------

    def send(self, request: bytes, *, timeout_s: float | None) -> None:
        """Write one request; ``timeout_s`` bounds the whole exchange (None: no bound)."""
        assert self.transport is not None
        self._reset()
        self._buffer.clear()
        self._active = True
        if timeout_s is not None:
            self.deadline = self._loop.time() + timeout_s
        self.transport.write(request)

    async def wait_head(self, *, timeout_s: float | None) -> None:
        """Until the status line and headers are in. Raises the exchange's error."""
        while not self.head_done:
            if self.error is not None:
                raise self.error
            if timeout_s is None:  # the common case, without a helper coroutine per call
                self._waiter = waiter = self._loop.create_future()
                try:
                    await waiter
                finally:
                    self._waiter = None
            else:
                await self._wait(timeout_s)

    def take_whole_body(self) -> bytes | None:
        """The whole body at once if it has fully arrived (no await needed), else None."""
        if not self.done or self.error is not None:
            return None
        pieces = self._pieces
        body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return body

    async def next_piece(self, *, timeout_s: float | None) -> bytes | None:
        """The next body bytes, or None at the end. Raises the exchange's error."""
        while True:
            if self._pieces:
                piece = self._pieces.popleft()
                self._buffered -= len(piece)
                if self._paused and self._buffered < HIGH_WATER_BYTES and self.transport:
                    self._paused = False
                    self.transport.resume_reading()
                return piece
            if self.error is not None:
                raise self.error
            if self.done:
                return None
            await self._wait(timeout_s)

    def reusable(self) -> bool:
        """Complete, kept alive, nothing buffered past the answer, reading not paused."""
        return (
            self.done
            and self.keep_alive
            and self.error is None
            and not self._buffer
            and not self._paused
            and self.transport is not None
        )

    def release(self) -> None:
        """End the exchange: back to the pool when complete, else the connection is dropped."""
        self._clear_deadline()
        reuse = self.reusable()
        self._active = False
        if reuse:
            self._client._give_back(self)
        else:
            self.abort()

    def abort(self) -> None:
        """Drop the connection now; it stops counting against the pool at once."""
        self._clear_deadline()
        if self.transport is not None:
            self.transport.abort()
        self._client._connection_closed(self)

    # -- internals -----------------------------------------------------------------------

    async def _wait(self, timeout_s: float | None) -> None:
        self._waiter = self._loop.create_future()
        try:
            if timeout_s is None:
                await self._waiter
            else:
                async with asyncio.timeout(timeout_s):
                    await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def sweep(self, now: float) -> None:
        """Fail the exchange if its deadline has passed (called by the client's sweeper)."""
        if self.deadline and now >= self.deadline:
            self._timed_out()

    def _timed_out(self) -> None:
        self.deadline = 0.0
        if self._active and not self.done:
            self._fail(TimeoutError())
            self._wake()
            if self.transport is not None:
                self.transport.abort()

    def _clear_deadline(self) -> None:
        self.deadline = 0.0

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        self.keep_alive = False

    def _finish(self) -> None:
        self.done = True
        self._clear_deadline()
        if self._buffer:  # bytes past the end of the answer: do not reuse
            self.keep_alive = False

    def _push(self, data: bytes) -> None:
        if data:
            self._pieces.append(data)
            self._buffered += len(data)
            if self._buffered > HIGH_WATER_BYTES and not self._paused and self.transport:
                self._paused = True
                self.transport.pause_reading()

    def _parse(self) -> None:
        if not self.head_done and not self._parse_head():
            return
        if self.done:
            return
        if self._framing == "length":
            take = min(self._remaining, len(self._buffer))
            self._push(bytes(self._buffer[:take]))
            del self._buffer[:take]
            self._remaining -= take
            if self._remaining == 0:
                self._finish()
        elif self._framing == "chunked":
            self._parse_chunks()
        else:  # until the runner closes the connection
            self._push(bytes(self._buffer))
            self._buffer.clear()

    def _parse_head(self) -> bool:
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD_BYTES:
                    raise ValueError("headers too large")
                return False
            lines = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
            del self._buffer[: end + 4]
            version, _, rest = lines[0].partition(" ")
            if not version.startswith("HTTP/1."):
                raise ValueError(f"bad status line {lines[0][:80]!r}")
            status = int(rest[:3])
            if 100 <= status < 200:
                continue  # an interim answer (103 Early Hints): the real one follows
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if not sep:
                    raise ValueError(f"bad header line {line[:80]!r}")
                headers[name.strip().lower()] = value.strip()
            self.status, self.headers, self.head_done = status, headers, True
            connection = headers.get("connection", "").lower()
            self.keep_alive = (
                "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
            )
            if status in NO_BODY_STATUSES:
                self._finish()
            elif "chunked" in headers.get("transfer-encoding", "").lower():
                self._framing = "chunked"
            elif "content-length" in headers:
                self._framing = "length"
                self._remaining = int(headers["content-length"])
                if self._remaining < 0:
                    raise ValueError("negative Content-Length")
                if self._remaining == 0:
                    self._finish()
            else:
                self._framing = "eof"
                self.keep_alive = False
            return True

    def _parse_chunks(self) -> None:
        buffer = self._buffer
        while buffer and not self.done:
            if self._chunk_state == "size":
                end = buffer.find(b"\r\n")
                if end < 0:
                    if len(buffer) > 1024:
                        raise ValueError("chunk size line too long")
                    return
                size = int(bytes(buffer[:end]).split(b";", 1)[0].strip(), 16)
                del buffer[: end + 2]
                self._remaining = size
                self._chunk_state = "data" if size else "trailer"
            elif self._chunk_state == "data":
                take = min(self._remaining, len(buffer))
                self._push(bytes(buffer[:take]))
                del buffer[:take]
                self._remaining -= take
                if self._remaining == 0:
                    self._chunk_state = "crlf"
            elif self._chunk_state == "crlf":
                if len(buffer) < 2:
                    return
                if buffer[:2] != b"\r\n":
                    raise ValueError("chunk not followed by CRLF")
                del buffer[:2]
                self._chunk_state = "size"
            else:  # trailer section: lines until an empty one
                end = buffer.find(b"\r\n")
                if end < 0:
                    return
                del buffer[: end + 2]
                if end == 0:
                    self._finish()


class UpstreamReply:
    """A runner's answer whose status and headers have arrived; ``close`` it when done."""

    __slots__ = ("_conn", "_headers", "_read_timeout_s", "_timeout_s", "_url", "status")

    def __init__(
        self, *, conn: _Connection, url: str, timeout_s: float, read_timeout_s: float | None
    ) -> None:
        self._conn = conn
        self._url = url
        self._timeout_s = timeout_s
        self._read_timeout_s = read_timeout_s
        # Kept here: after ``close`` the connection may already carry another call.
        self.status = conn.status
        self._headers = conn.headers

    @property
    def content_type(self) -> str:
        """The Content-Type header as the runner sent it, parameters included."""
        return self._headers.get("content-type", "application/octet-stream")

    def header(self, name: str) -> str | None:
        """One header of the answer by its lower-case name; None when the runner sent none."""
        return self._headers.get(name)

    @property
    def is_event_stream(self) -> bool:
        return self.content_type.partition(";")[0].strip().lower() == "text/event-stream"

    async def read(self) -> bytes:
        """The whole body. Raises ``UpstreamTimeout`` or ``UpstreamUnavailable``."""
        conn, timeout_s = self._conn, self._read_timeout_s
        body = conn.take_whole_body()
        if body is not None:  # a small answer usually arrives with its head
            return body
        pieces = []
        try:
            while (piece := await conn.next_piece(timeout_s=timeout_s)) is not None:
                pieces.append(piece)
        except (OSError, TimeoutError) as exc:
            raise _translate(exc, url=self._url, timeout_s=self._timeout_s) from None
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive from the socket, without waiting to fill a buffer.

        Raises ``UpstreamTimeout`` when the runner stays silent longer than the timeout,
        ``UpstreamUnavailable`` when it drops the stream.
        """
        while True:
            try:
                piece = await self._conn.next_piece(timeout_s=self._read_timeout_s)
            except (OSError, TimeoutError) as exc:
                raise _translate(exc, url=self._url, timeout_s=self._timeout_s) from None
            if piece is None:
                return
            yield piece

    def close(self) -> None:
        """Return the connection to the pool (or drop it if the body was not read to the end)."""
        self._conn.release()


def _translate(exc: BaseException, *, url: str, timeout_s: float) -> Exception:
    """The project error for a failure of a call already sent to ``url``."""
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout(f"runner at {url} did not answer within {timeout_s:g}s")
    detail = str(exc) or type(exc).__name__
    return UpstreamUnavailable(f"runner at {url} failed mid-call: {detail}", before_send=False)


class RunnerClient:
    """Kept-alive connections to every runner: a bounded pool, fixed timeouts, no retries."""

    def __init__(self, *, max_connections: int, timeout_s: float) -> None:
        self._max_connections = max_connections
        self._timeout_s = timeout_s
        self._endpoints: dict[str, _Endpoint] = {}
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._connections: set[_Connection] = set()
        self._opening = 0
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        self._ssl: ssl.SSLContext | None = None
        self._started = False
        self._sweep_s = max(0.005, min(0.05, timeout_s / 20))
        self._sweeper: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        """Make the pool usable; must run inside the event loop that will use it."""
        self._started = True
        self._loop = asyncio.get_running_loop()
        self._sweep()

    def _sweep(self) -> None:
        """Time out exchanges past their deadline, then come back in ``_sweep_s``.

        One periodic check for every connection instead of a timer per call: creating and
        cancelling a timer on each call showed in profiles of the router at saturation.
        A whole-answer timeout therefore fires up to ``_sweep_s`` late.
        """
        assert self._loop is not None
        now = self._loop.time()
        for conn in list(self._connections):
            conn.sweep(now)
        if self._started:
            self._sweeper = self._loop.call_later(self._sweep_s, self._sweep)

    async def close(self) -> None:
        """Close every connection; calls still using one fail."""
        self._started = False
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for conn in list(self._connections):
            conn.abort()
        self._idle.clear()
        for waiter in self._slot_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._slot_waiters.clear()
        await asyncio.sleep(0)  # let the transports run connection_lost

    async def post(
        self,
        *,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        stream: bool,
    ) -> UpstreamReply:
        """POST ``body`` to ``url`` and return once the answer's headers arrived.

        ``stream`` picks the timeout: whole-answer for JSON, between-chunks for SSE.
        Raises ``UpstreamUnavailable`` (``before_send`` true when the connection could not
        be made) or ``UpstreamTimeout``. Never returns None.
        """
        if not self._started:
            raise RuntimeError("RunnerClient.start() was not awaited")
        endpoint = self._endpoints.get(url)
        if endpoint is None:
            endpoint = self._endpoints[url] = _Endpoint(url)
        request = _request_bytes(endpoint, body, headers)
        # JSON: one deadline for connect, headers and body; a stream: each wait bounded.
        started = time.monotonic()
        conn = await self._acquire(endpoint, url=url)
        whole = None if stream else max(self._timeout_s - (time.monotonic() - started), 0.0)
        read_timeout = self._timeout_s if stream else None
        conn.send(request, timeout_s=whole)
        try:
            await conn.wait_head(timeout_s=read_timeout)
        except (OSError, TimeoutError) as exc:
            conn.release()
            raise _translate(exc, url=url, timeout_s=self._timeout_s) from None
        except BaseException:
            conn.release()
            raise
        return UpstreamReply(
            conn=conn, url=url, timeout_s=self._timeout_s, read_timeout_s=read_timeout
        )

    # -- the pool ------------------------------------------------------------------------

    async def _acquire(self, endpoint: _Endpoint, *, url: str) -> _Connection:
        """A kept-alive connection to ``endpoint``, or a new one. Raises ``UpstreamUnavailable``
        (``before_send``) when it cannot connect, ``UpstreamTimeout`` when connecting is slow."""
        idle = self._idle.get(endpoint.key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be closing
            if conn.transport is not None and now - conn.idle_since < KEEPALIVE_S:
                return conn
            conn.abort()
        while len(self._connections) + self._opening >= self._max_connections:
            if not self._close_one_idle():
                waiter = asyncio.get_running_loop().create_future()
                self._slot_waiters.append(waiter)
                try:
                    await waiter
                finally:
                    if waiter in self._slot_waiters:
                        self._slot_waiters.remove(waiter)
                if not self._started:
                    raise RuntimeError("RunnerClient is closed")
                idle = self._idle.get(endpoint.key)
                while idle:
                    conn = idle.pop()
                    if conn.transport is not None:
                        return conn
        return await self._connect(endpoint, url=url)

    async def _connect(self, endpoint: _Endpoint, *, url: str) -> _Connection:
        loop = asyncio.get_running_loop()
        context = None
        if endpoint.tls:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        self._opening += 1
        try:
            async with asyncio.timeout(self._timeout_s):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self, endpoint.key),
                    endpoint.host,
                    endpoint.port,
                    ssl=context,
                )
        except TimeoutError:
            raise UpstreamTimeout(
                f"runner at {url} did not accept a connection within {self._timeout_s:g}s"
            ) from None
        except OSError as exc:
            raise UpstreamUnavailable(
                f"cannot connect to runner at {url}: {exc}", before_send=True
            ) from None
        finally:
            self._opening -= 1
            self._wake_slot_waiter()
        self._connections.add(conn)
        return conn

    def _give_back(self, conn: _Connection) -> None:
        conn.idle_since = time.monotonic()
        self._idle.setdefault(conn.key, []).append(conn)
        self._wake_slot_waiter()

    def _close_one_idle(self) -> bool:
        for idle in self._idle.values():
            while idle:
                conn = idle.pop(0)  # the oldest
                if conn.transport is not None:
                    conn.abort()
                    return True
        return False

    def _connection_closed(self, conn: _Connection) -> None:
        self._connections.discard(conn)
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)
        self._wake_slot_waiter()

    def _wake_slot_waiter(self) -> None:
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


_HEADER_BLOCKS: dict[tuple[tuple[str, str], ...], bytes] = {}
"""Encoded header lines by header set: most calls send the same two headers."""
_MAX_HEADER_BLOCKS = 256


def _request_bytes(endpoint: _Endpoint, body: bytes, headers: Mapping[str, str]) -> bytes:
    """The whole request: line, Host, the caller's headers, Content-Length, body."""
    key = tuple(headers.items())
    block = _HEADER_BLOCKS.get(key)
    if block is None:
        lines = []
        for name, value in key:
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                continue  # never let a forwarded header smuggle another line in
            lines.append(f"{name}: {value}\r\n".encode("latin-1", "replace"))
        block = b"".join(lines)
        if len(_HEADER_BLOCKS) >= _MAX_HEADER_BLOCKS:  # per-call ids: do not grow for ever
            _HEADER_BLOCKS.clear()
        _HEADER_BLOCKS[key] = block
    return b"%s%sContent-Length: %d\r\n\r\n%s" % (endpoint.request_prefix, block, len(body), body)
