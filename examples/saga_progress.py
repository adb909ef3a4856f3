"""Print each saga's progress as plnt's services report it: a FastStream subscriber.

    PLNT_NATS_URL=nats://127.0.0.1:4222 faststream run examples.saga_progress:app

One line per event, ``<namespace>/<name> <sagaid> <event>``, and the saga's end when a
terminal event arrives. The program has a durable consumer of its own (``saga-progress``,
or ``SAGA_PROGRESS_DURABLE``), so it never takes events from plnt's services, and a
restart goes on where it stopped. docs/subscribers.md explains the subjects and events.
"""

import os

from faststream import FastStream
from faststream.middlewares import AckPolicy
from faststream.nats import JStream, NatsBroker
from nats.js import api

from plnt_common.events import Envelope, EventType

TERMINAL = {
    EventType.RUN_READY: "ready",
    EventType.RUN_ROLLED_BACK: "rolled back",
    EventType.RUN_FAILED: "failed",
    EventType.RUN_REMOVED: "removed",
}

DURABLE = os.environ.get("SAGA_PROGRESS_DURABLE", "saga-progress")
broker = NatsBroker(os.environ.get("PLNT_NATS_URL", "nats://127.0.0.1:4222"))
app = FastStream(broker)


@broker.subscriber(
    "plnt.evt.>",
    stream=JStream("PLNT_EVENTS", declare=False),  # plnt provisions the stream
    queue=DURABLE,  # the durable's name: copies of the program share its events
    deliver_policy=api.DeliverPolicy.ALL,
    ack_policy=AckPolicy.ACK,  # ack once the line is printed, whatever happened
)
async def print_progress(event: Envelope) -> None:
    """Print one line for ``event``, and the saga's outcome when it ended."""
    print(f"{event.subject} {event.sagaid} {event.event_type.value}", flush=True)
    if (outcome := TERMINAL.get(event.event_type)) is not None:
        print(f"{event.subject} {event.sagaid} ended: {outcome}", flush=True)
