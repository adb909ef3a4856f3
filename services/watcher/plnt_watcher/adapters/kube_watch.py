"""One Kubernetes watch request, read on a daemon thread and handed to asyncio.

The client's watch is a blocking read of a streamed response. Reading it on a daemon
thread keeps it off the event loop, and unlike ``asyncio.to_thread`` it never holds up
the loop's shutdown; closing shuts the socket so the blocked read ends at once. This is
one request: listing, resuming and 410 recovery are the source's business.
"""

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import AsyncGenerator, Callable
from typing import Any

from kubernetes.watch.watch import iter_resp_lines

from plnt_watcher.adapters.kube_api import KubernetesUnavailable, translate

OpenStream = Callable[[], Any]
"""Starts the request; returns the unread ``urllib3`` response (``_preload_content=False``)."""


class _Reader:
    """The thread side: reads lines, parses them, queues them for the loop."""

    def __init__(
        self,
        open_stream: OpenStream,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[tuple[str, Any]],
    ) -> None:
        self._open = open_stream
        self._loop = loop
        self._queue = queue
        self._lock = threading.Lock()
        self._response: Any = None
        self._closed = False

    def run(self) -> None:
        response = None
        try:
            response = self._open()
            with self._lock:
                self._response = response
                if self._closed:
                    return
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                if self._closed:
                    return
                if line:
                    self._put("event", json.loads(line))
            self._put("end", None)
        except Exception as exc:
            if not self._closed:
                self._put("error", exc)
        finally:
            if response is not None:
                with contextlib.suppress(Exception):
                    if self._closed:
                        response.close()
                    else:  # fully read: the connection can serve the next request
                        response.release_conn()

    def _put(self, kind: str, value: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is listening
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (kind, value))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            response = self._response
        connection = getattr(response, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # unblocks the read in the thread


async def watch_events(open_stream: OpenStream) -> AsyncGenerator[dict[str, Any], None]:
    """The decoded events of one watch request, until the server ends it.

    Raises a ``PlntError`` (via ``translate``) when the request fails or the stream
    breaks; ``Gone`` when the server answers the request itself with 410.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    reader = _Reader(open_stream, loop, queue)
    threading.Thread(target=reader.run, name="plnt-kube-watch", daemon=True).start()
    try:
        while True:
            kind, value = await queue.get()
            if kind == "event":
                yield value
            elif kind == "error":
                if isinstance(value, ValueError):
                    raise KubernetesUnavailable(f"unreadable watch event: {value}") from None
                raise translate(value) from None
            else:
                return
    finally:
        reader.close()
