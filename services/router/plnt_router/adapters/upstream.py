"""The pooled HTTP client the router talks to runners with: one session, kept-alive connections.

``RunnerClient.post`` sends a call to a runner's ``/invoke`` and returns as soon as the
answer's headers are in; the caller then reads the body whole or streams it chunk by
chunk. aiohttp errors are translated into ``UpstreamTimeout`` and ``UpstreamUnavailable``
here, so nothing above this module catches aiohttp exceptions from the client side. It
does not retry, pick runners or build responses.
"""

from collections.abc import AsyncIterator, Mapping

import aiohttp

from plnt_router.errors import UpstreamTimeout, UpstreamUnavailable

# Below the runners' (aiohttp's default 75 s) server-side keep-alive, so the router drops an
# idle connection before the runner does and never writes a request into a closing socket.
KEEPALIVE_S = 30.0


def _translate(exc: BaseException, *, url: str, timeout_s: float) -> Exception:
    """The project error for an aiohttp/socket failure talking to ``url``."""
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout(f"runner at {url} did not answer within {timeout_s:g}s")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamUnavailable(
            f"cannot connect to runner at {url}: {exc.os_error or exc}", before_send=True
        )
    detail = str(exc) or type(exc).__name__
    return UpstreamUnavailable(f"runner at {url} failed mid-call: {detail}", before_send=False)


class UpstreamReply:
    """A runner's answer whose status and headers have arrived; ``close`` it when done."""

    __slots__ = ("_response", "_timeout_s", "_url")

    def __init__(self, *, response: aiohttp.ClientResponse, url: str, timeout_s: float) -> None:
        self._response = response
        self._url = url
        self._timeout_s = timeout_s

    @property
    def status(self) -> int:
        return self._response.status

    @property
    def content_type(self) -> str:
        """The Content-Type header as the runner sent it, parameters included."""
        return self._response.headers.get("Content-Type", "application/octet-stream")

    @property
    def is_event_stream(self) -> bool:
        return self._response.content_type == "text/event-stream"

    async def read(self) -> bytes:
        """The whole body. Raises ``UpstreamTimeout`` or ``UpstreamUnavailable``."""
        try:
            return await self._response.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _translate(exc, url=self._url, timeout_s=self._timeout_s) from None

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive from the socket, without waiting to fill a buffer.

        Raises ``UpstreamTimeout`` when the runner stays silent longer than the timeout,
        ``UpstreamUnavailable`` when it drops the stream.
        """
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _translate(exc, url=self._url, timeout_s=self._timeout_s) from None

    def close(self) -> None:
        """Return the connection to the pool (or drop it if the body was not read to the end)."""
        self._response.release()


class RunnerClient:
    """One shared aiohttp session to every runner: keep-alive, bounded pool, fixed timeouts."""

    def __init__(self, *, max_connections: int, timeout_s: float) -> None:
        self._max_connections = max_connections
        self._timeout_s = timeout_s
        # A JSON answer must be complete within the timeout; a stream may last longer
        # as long as it never stays silent for the whole timeout.
        self._whole = aiohttp.ClientTimeout(total=timeout_s)
        self._streaming = aiohttp.ClientTimeout(
            total=None, sock_connect=timeout_s, sock_read=timeout_s
        )
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Open the session; must run inside the event loop that will use it."""
        connector = aiohttp.TCPConnector(
            limit=self._max_connections,
            limit_per_host=0,
            keepalive_timeout=KEEPALIVE_S,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            trust_env=False,
            raise_for_status=False,
            skip_auto_headers=("User-Agent",),
        )

    async def close(self) -> None:
        """Close every pooled connection; calls still using one fail."""
        if self._session is not None:
            await self._session.close()
            self._session = None

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
        Raises ``UpstreamUnavailable`` (``before_send`` true when the connection was
        refused) or ``UpstreamTimeout``. Never returns None.
        """
        if self._session is None:
            raise RuntimeError("RunnerClient.start() was not awaited")
        try:
            response = await self._session.post(
                url,
                data=body,
                headers=headers,
                timeout=self._streaming if stream else self._whole,
                allow_redirects=False,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _translate(exc, url=url, timeout_s=self._timeout_s) from None
        return UpstreamReply(response=response, url=url, timeout_s=self._timeout_s)
