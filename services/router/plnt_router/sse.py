"""Reading a server-sent-events stream: the runner's answer to a streamed call. Pure.

``SseDecoder`` turns body bytes, however they were split by the network, into complete
``(event, data)`` pairs. It understands what runners send (``event:`` and ``data:``
lines, events ended by a blank line); comments and ids are skipped. Writing events is
``responses.sse_event``'s job.
"""

DEFAULT_EVENT = "message"


class SseDecoder:
    """Feed it body bytes; it returns the events those bytes completed, in order."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, piece: bytes) -> list[tuple[str, str]]:
        self._buffer = (self._buffer + piece).replace(b"\r\n", b"\n")
        *blocks, self._buffer = self._buffer.split(b"\n\n")
        events = []
        for block in blocks:
            event, data = DEFAULT_EVENT, []
            for line in block.decode("utf-8", "replace").split("\n"):
                field, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if field == "event":
                    event = value
                elif field == "data":
                    data.append(value)
            if data:
                events.append((event, "\n".join(data)))
        return events
