"""An OTLP/HTTP trace receiver: a real aiohttp server on a free loopback port.

It accepts ``POST /v1/traces`` with a protobuf ``ExportTraceServiceRequest`` (decoded with
the official ``opentelemetry-proto`` package), keeps every span with its service name, and
answers an empty ``ExportTraceServiceResponse`` as a collector does. ``discard=True`` keeps
nothing (benchmarks). Point a process at it with ``OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint``.

    async with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}
        ...
        spans = await receiver.wait_for(lambda spans: any(s.name == "chat fake" for s in spans))
"""

import asyncio
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

SPAN_KIND_SERVER = 2
SPAN_KIND_CLIENT = 3
STATUS_ERROR = 2


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, ids as lowercase hex (``parent_id`` empty for a root span)."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    status_code: int
    status_message: str
    events: tuple[str, ...]
    """The names of the span's events (``exception`` for a recorded exception)."""


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


class OtlpReceiver:
    """Collects the spans exported to it; ``requests`` counts the POSTs received."""

    def __init__(self, *, discard: bool = False) -> None:
        self.discard = discard
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._port = 0

    @property
    def endpoint(self) -> str:
        """The base URL for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter adds /v1/traces)."""
        if self._runner is None:
            raise RuntimeError("OtlpReceiver is not running: use `async with OtlpReceiver()`")
        return f"http://127.0.0.1:{self._port}"

    async def __aenter__(self) -> "OtlpReceiver":
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._export)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._port = int(sock.getsockname()[1])
        await web.SockSite(self._runner, sock).start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _export(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.requests += 1
        if request.content_type != "application/x-protobuf":
            return web.Response(status=415, text="send application/x-protobuf")
        if not self.discard:
            export = ExportTraceServiceRequest()
            export.ParseFromString(body)
            self.spans.extend(_spans(export))
            self._changed.set()
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    async def wait_for(
        self, done: Callable[[Sequence[ReceivedSpan]], bool], *, timeout_s: float = 10.0
    ) -> list[ReceivedSpan]:
        """The spans received once ``done(spans)`` holds; fails naming what arrived if it
        does not within ``timeout_s``."""
        try:
            async with asyncio.timeout(timeout_s):
                while not done(self.spans):
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            names = [f"{s.service}:{s.name}" for s in self.spans]
            raise AssertionError(f"spans not received within {timeout_s}s; got {names}") from None
        return list(self.spans)


def _spans(export: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    spans = []
    for resource_spans in export.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        service = str(resource.get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        service=service,
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        kind=span.kind,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        status_code=span.status.code,
                        status_message=span.status.message,
                        events=tuple(event.name for event in span.events),
                    )
                )
    return spans
