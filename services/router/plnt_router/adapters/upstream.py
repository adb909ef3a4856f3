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
connection is a ``runner_connection.RunnerConnection`` that writes the request in one
``write`` and leaves the framing of the answer (Content-Length, chunked, or until close)
to llhttp. What aiohttp's client did for the router and this module keeps: a bounded pool
with LIFO reuse and an idle keep-alive limit, connect errors told apart from mid-call
failures, a whole-answer timeout for JSON and a between-chunks timeout for streams, and
read back-pressure.
"""

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlsplit

from plnt_router.adapters.runner_connection import RunnerConnection
from plnt_router.errors import UpstreamTimeout, UpstreamUnavailable

# Below the runners' (aiohttp's default 75 s) server-side keep-alive, so the router drops an
# idle connection before the runner does and never writes a request into a closing socket.
KEEPALIVE_S = 30.0


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


class UpstreamReply:
    """A runner's answer whose status and headers have arrived; ``close`` it when done."""

    __slots__ = ("_conn", "_headers", "_read_timeout_s", "_timeout_s", "_url", "status")

    def __init__(
        self, *, conn: RunnerConnection, url: str, timeout_s: float, read_timeout_s: float | None
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


def _translate(
    exc: BaseException, *, url: str, timeout_s: float, before_answer: bool = False
) -> Exception:
    """The project error for a failure of a call already sent to ``url``; ``before_answer``
    when no status line had arrived yet."""
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout(f"runner at {url} did not answer within {timeout_s:g}s")
    detail = str(exc) or type(exc).__name__
    return UpstreamUnavailable(
        f"runner at {url} failed mid-call: {detail}", before_send=False, before_answer=before_answer
    )


class RunnerClient:
    """Kept-alive connections to every runner: a bounded pool, fixed timeouts, no retries."""

    def __init__(self, *, max_connections: int, timeout_s: float) -> None:
        self._max_connections = max_connections
        self._timeout_s = timeout_s
        self._endpoints: dict[str, _Endpoint] = {}
        self._idle: dict[tuple[str, str, int], list[RunnerConnection]] = {}
        self._connections: set[RunnerConnection] = set()
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
        connect_timeout_s: float | None = None,
    ) -> UpstreamReply:
        """POST ``body`` to ``url`` and return once the answer's headers arrived.

        ``stream`` picks the timeout: whole-answer for JSON, between-chunks for SSE.
        ``connect_timeout_s`` bounds a new connection on its own (None: the call's timeout).
        Raises ``UpstreamUnavailable`` (``before_send`` true when the connection could not
        be made, ``before_answer`` when it broke before the status line) or
        ``UpstreamTimeout`` (``before_send`` when connecting took too long). Never returns
        None.
        """
        if not self._started:
            raise RuntimeError("RunnerClient.start() was not awaited")
        endpoint = self._endpoints.get(url)
        if endpoint is None:
            endpoint = self._endpoints[url] = _Endpoint(url)
        request = _request_bytes(endpoint, body, headers)
        # JSON: one deadline for connect, headers and body; a stream: each wait bounded.
        started = time.monotonic()
        conn = await self._acquire(endpoint, url=url, connect_timeout_s=connect_timeout_s)
        whole = None if stream else max(self._timeout_s - (time.monotonic() - started), 0.0)
        read_timeout = self._timeout_s if stream else None
        conn.send(request, timeout_s=whole)
        try:
            await conn.wait_head(timeout_s=read_timeout)
        except (OSError, TimeoutError) as exc:
            conn.release()
            raise _translate(exc, url=url, timeout_s=self._timeout_s, before_answer=True) from None
        except BaseException:
            conn.release()
            raise
        return UpstreamReply(
            conn=conn, url=url, timeout_s=self._timeout_s, read_timeout_s=read_timeout
        )

    # -- the pool ------------------------------------------------------------------------

    async def _acquire(
        self, endpoint: _Endpoint, *, url: str, connect_timeout_s: float | None = None
    ) -> RunnerConnection:
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
        timeout_s = connect_timeout_s or self._timeout_s
        return await self._connect(endpoint, url=url, timeout_s=timeout_s)

    async def _connect(
        self, endpoint: _Endpoint, *, url: str, timeout_s: float
    ) -> RunnerConnection:
        loop = asyncio.get_running_loop()
        context = None
        if endpoint.tls:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        self._opening += 1
        try:
            async with asyncio.timeout(timeout_s):
                _, conn = await loop.create_connection(
                    lambda: RunnerConnection(self, endpoint.key),
                    endpoint.host,
                    endpoint.port,
                    ssl=context,
                )
        except TimeoutError:
            raise UpstreamTimeout(
                f"runner at {url} did not accept a connection within {timeout_s:g}s",
                before_send=True,
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

    def give_back(self, conn: RunnerConnection) -> None:
        """Park a connection whose exchange ended cleanly (called by the connection)."""
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

    def connection_closed(self, conn: RunnerConnection) -> None:
        """Forget a dropped connection and free its slot (called by the connection)."""
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
