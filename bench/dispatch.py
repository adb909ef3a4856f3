"""FastStream's per-message cost in a saga service, against calling the handler directly.

Both paths start from the payload as ``EventConsumer`` receives it and end in the same
handler: the direct one decodes the event and calls the handler, as ``EventConsumer``
would without FastStream; the other decodes it and hands it to the service app's
subscriber (``FeedSubscriber``: FastStream's parser, decoder, middlewares and handler
call). In process, no network: the figure is the CPU cost FastStream adds per message.
"""

import tempfile
import time
from pathlib import Path

from nats.aio.msg import Msg

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, Delivery
from plnt_common.bus.service_app import service_app
from plnt_common.events import Envelope, EventType, RunDeleted, decode_event, new_event, saga_id
from plnt_common.nats_server import NatsServer, free_port

ROUNDS = 5


class _Counted:
    def __init__(self) -> None:
        self.handled = 0

    async def handle(self, event: Envelope, delivery: Delivery, /) -> None:
        self.handled += 1

    async def on_exhausted(self, event: Envelope, exc: BaseException, /) -> None:
        raise AssertionError(exc)


async def dispatch_costs(messages: int) -> tuple[float, float]:
    """(seconds per message through the service app, through a direct handler call), the
    median of ``ROUNDS`` interleaved rounds, on a fresh nats-server."""
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(store_dir=Path(tmp), port=free_port()).start()
        try:
            return await _costs(server.url, messages)
        finally:
            server.stop()


async def _costs(url: str, messages: int) -> tuple[float, float]:
    bus = await Bus.open(url, service="bench-dispatch")
    steps = _Counted()
    deleted = subjects.event_filter(EventType.RUN_DELETED)
    spec = ConsumerSpec(service="bench-dispatch", filters=(deleted,))
    app = service_app(bus, spec, emits=(), handlers=steps)
    await app.app.start()
    event = new_event(
        EventType.RUN_DELETED,
        RunDeleted(),
        namespace="bench",
        name="dispatch",
        sagaid=saga_id("bench", "dispatch", 1),
        generation=1,
        source="bench",
    )
    payload = event.model_dump_json().encode()
    subject = subjects.event_subject(event.event_type, "bench", "dispatch")
    msg = Msg(bus.nc, subject=subject, reply="", data=payload, headers={})
    via_app, direct = [], []
    try:
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for _ in range(messages):
                await app.subscriber._dispatch(decode_event(msg.data), Delivery(msg, 1))
            via_app.append((time.perf_counter() - started) / messages)
            started = time.perf_counter()
            for _ in range(messages):
                await steps.handle(decode_event(msg.data), Delivery(msg, 1))
            direct.append((time.perf_counter() - started) / messages)
    finally:
        await app.app.stop()
        await bus.close()
    assert steps.handled == 2 * ROUNDS * messages
    return sorted(via_app)[ROUNDS // 2], sorted(direct)[ROUNDS // 2]
