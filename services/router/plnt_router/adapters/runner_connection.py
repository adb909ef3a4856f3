"""One kept-alive HTTP/1.1 connection to a runner, its answers framed by llhttp.

A ``RunnerConnection`` is an ``asyncio.Protocol`` carrying one exchange at a time: it
writes a request whole, feeds what arrives to ``httptools``' response parser (llhttp,
the parser uvicorn uses) and hands the body on piece by piece. It neither opens nor
pools connections (``upstream.RunnerClient`` does) nor translates errors: waits raise
``OSError`` or ``TimeoutError``.
"""

import asyncio
from collections import deque
from typing import Protocol, cast

import httptools

MAX_HEAD_BYTES = 64 * 1024
"""Largest status line plus headers accepted from a runner."""
HIGH_WATER_BYTES = 256 * 1024
"""A streamed body buffered beyond this pauses reading from the runner until consumed."""


class ConnectionPool(Protocol):
    """What a connection tells the pool that opened it."""

    def give_back(self, conn: "RunnerConnection") -> None:
        """The exchange ended cleanly: the connection can carry another."""

    def connection_closed(self, conn: "RunnerConnection") -> None:
        """The connection is gone (or going): it no longer counts against the pool."""


class RunnerConnection(asyncio.Protocol):
    """One kept-alive connection to a runner, carrying one exchange at a time.

    llhttp (``httptools``) frames the answer and calls the ``on_*`` methods below: they
    fill ``_pieces`` with body bytes and ``_wake`` resolves ``_waiter`` whenever there is
    something new (the head, a piece, the end, or an error).
    """

    def __init__(self, pool: ConnectionPool, key: tuple[str, str, int]) -> None:
        self._pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self.headers: dict[str, str] = {}
        self._waiter: asyncio.Future[None] | None = None
        self._loop = asyncio.get_running_loop()
        self.deadline = 0.0
        """Loop time by which the exchange must be complete; 0 when unbounded (see ``sweep``)."""
        self._active = False
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.head_done = False
        self.done = False
        self.keep_alive = True
        self.error: BaseException | None = None
        self._pieces: deque[bytes] = deque()
        self._buffered = 0
        self._head_bytes = 0
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
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if not self.done:  # past the answer's end, bad bytes only rule out reuse
                self._fail(ConnectionError(f"invalid HTTP answer: {exc}"))
            self.keep_alive = False
            self.abort()
        else:
            if not self.head_done:
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES:
                    self._fail(ConnectionError("invalid HTTP answer: headers too large"))
                    self.abort()
        self._wake()

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost finishes the exchange

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._active and not self.done:
            if self.head_done and self._ends_at_close():
                self._finish()
            else:
                self._fail(exc or ConnectionResetError("the runner closed the connection"))
        self._wake()
        self._pool.connection_closed(self)

    # -- llhttp callbacks --------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.done:  # raising makes feed_data fail: see data_received
            raise ConnectionError("bytes past the end of the answer")
        self.headers = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.head_done:  # trailers after a chunked body are not the answer's headers
            self.headers[name.decode("latin-1").lower()] = value.decode("latin-1").strip()

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status >= 200:  # below: an interim answer (103 Early Hints), the real one follows
            self.status, self.head_done = status, True

    def on_body(self, body: bytes) -> None:
        self._pieces.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER_BYTES and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if self.head_done:  # not the end of an interim answer
            self.keep_alive = self._parser.should_keep_alive()
            self._finish()

    # -- exchange ----------------------------------------------------------------------------

    def send(self, request: bytes, *, timeout_s: float | None) -> None:
        """Write one request; ``timeout_s`` bounds the whole exchange (None: no bound)."""
        assert self.transport is not None
        self._reset()
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
        """Complete, kept alive, nothing past the answer, reading not paused."""
        return (
            self.done
            and self.keep_alive
            and self.error is None
            and not self._paused
            and self.transport is not None
        )

    def release(self) -> None:
        """End the exchange: back to the pool when complete, else the connection is dropped."""
        self._clear_deadline()
        reuse = self.reusable()
        self._active = False
        if reuse:
            self._pool.give_back(self)
        else:
            self.abort()

    def abort(self) -> None:
        """Drop the connection now; it stops counting against the pool at once."""
        self._clear_deadline()
        if self.transport is not None:
            self.transport.abort()
        self._pool.connection_closed(self)

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
        """Fail the exchange if its deadline has passed (called by the pool's sweeper)."""
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

    def _ends_at_close(self) -> bool:
        """Whether the answer has neither a length nor chunks: its body ends at the close."""
        headers = self.headers
        return (
            "content-length" not in headers
            and "chunked" not in headers.get("transfer-encoding", "").lower()
        )
