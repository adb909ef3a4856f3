"""A run's saga timeline for the Gantt page, read from PLNT_EVENTS as ``plnt history`` does.

Each saga becomes rows, one per step (an event type): the step starts when the saga's
previous event was stored and lasts until its own; a step seen again counts as a retry;
dead letters (events a service gave up on) are attached to their step. A saga's trace id
is the one its events' ``traceparent`` headers carry (the watcher starts one trace per
saga; with tracing off there is none).
"""

from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from plnt_common import subjects
from plnt_common.bus.history import read_batches, read_dead_letters, reader_config
from plnt_common.errors import SpecInvalid
from plnt_common.events import Envelope, decode_event
from plnt_console.traces import TRACEPARENT, trace_id


def _read(msg: Msg) -> tuple[int, Envelope | None, str]:
    """(stream sequence, the event or None when it does not decode, its trace id)."""
    try:
        event: Envelope | None = decode_event(msg.data)
    except SpecInvalid:
        event = None
    return msg.metadata.sequence.stream, event, trace_id((msg.headers or {}).get(TRACEPARENT, ""))


async def timeline(
    nc: Client, js: JetStreamContext, *, namespace: str, name: str
) -> dict[str, Any]:
    """``{"sagas": [{"sagaId", "traceId", "start", "steps": [...]}], "deadLetters": n}``."""
    sagas: dict[str, dict[str, Any]] = {}
    last_at: dict[str, float] = {}
    reader = reader_config(subjects.run_filter(namespace, name))
    async for batch in read_batches(nc, stream=subjects.STREAM, config=reader, keep=_read):
        for sequence, event, trace in batch:
            if event is not None:
                _add(sagas, last_at, event, sequence=sequence, trace=trace)
    dead = await read_dead_letters(js, namespace=namespace, name=name)
    for letter in dead:
        if letter.event is None or letter.event.sagaid not in sagas:
            continue
        row = sagas[letter.event.sagaid]["steps"].get(letter.event.event_type.value)
        if row is not None:
            row["deadLetters"] += 1
    ordered = sorted(sagas.values(), key=lambda saga: saga["start"])
    for saga in ordered:
        saga["steps"] = sorted(saga["steps"].values(), key=lambda row: row["sequence"])
    return {"namespace": namespace, "name": name, "sagas": ordered, "deadLetters": len(dead)}


def _add(
    sagas: dict[str, dict[str, Any]],
    last_at: dict[str, float],
    event: Envelope,
    *,
    sequence: int,
    trace: str,
) -> None:
    at = event.time.timestamp()
    saga = sagas.setdefault(
        event.sagaid, {"sagaId": event.sagaid, "traceId": "", "start": at, "steps": {}}
    )
    if trace:  # every event of a saga carries its one trace
        saga["traceId"] = trace
    started = last_at.get(event.sagaid, at)
    last_at[event.sagaid] = at
    step = event.event_type.value
    row = saga["steps"].get(step)
    if row is None:
        saga["steps"][step] = {
            "step": step,
            "start": started,
            "durationS": at - started,
            "retries": 0,
            "deadLetters": 0,
            "sequence": sequence,
        }
    else:
        row["retries"] += 1
        row["durationS"] = at - row["start"]
