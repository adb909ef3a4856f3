"""A nats-py KV watcher that reports the end of its initial values before any of them.

nats-py does this when the server has delivered the whole listing before the client
counted a message of it (it asks for the consumer's pending count afterwards and finds
none); tests wrap a real watcher in ``MarkFirst`` to make that race happen every time.
"""

from typing import Any


class MarkFirst:
    """The wrapped watcher's updates, preceded by one ``None`` and without its own."""

    def __init__(self, watcher: Any) -> None:
        self._watcher = watcher
        self._marked = False

    def __aiter__(self) -> "MarkFirst":
        return self

    async def __anext__(self) -> Any:
        if not self._marked:
            self._marked = True
            return None
        update = await anext(self._watcher)
        return update if update is not None else await anext(self._watcher)

    async def stop(self) -> None:
        await self._watcher.stop()
