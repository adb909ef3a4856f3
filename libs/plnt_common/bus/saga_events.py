"""Reads back an event a saga published earlier: the stream keeps the last per subject."""

from nats.js.errors import NotFoundError

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.events import Envelope, EventType, decode_event


async def last_of_saga(bus: Bus, event_type: EventType, of: Envelope) -> Envelope | None:
    """The run's latest ``event_type`` event when it belongs to ``of``'s saga, else None.

    A later saga's event (the run moved on) is None too. Raises nats-py's errors when the
    server cannot be reached.
    """
    event = await last_of_run(bus, event_type, of.namespace, of.name)
    return event if event is not None and event.sagaid == of.sagaid else None


async def last_of_run(
    bus: Bus, event_type: EventType, namespace: str, name: str
) -> Envelope | None:
    """The run's latest ``event_type`` event, of whichever saga; None when it has none."""
    subject = subjects.event_subject(event_type, namespace, name)
    try:
        raw = await bus.js.get_last_msg(subjects.STREAM, subject, direct=bus.events_direct)
    except NotFoundError:
        return None
    if raw.data is None:
        return None
    return decode_event(raw.data)
