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
    subject = subjects.event_subject(event_type, of.namespace, of.name)
    try:
        raw = await bus.js.get_last_msg(subjects.STREAM, subject)
    except NotFoundError:
        return None
    if raw.data is None:
        return None
    event = decode_event(raw.data)
    return event if event.sagaid == of.sagaid else None
