"""A run's saga timeline for the Gantt page, read from PLNT_EVENTS as ``plnt history`` does.

Each saga becomes rows, one per step (an event type): the step starts when the saga's
previous event was stored and lasts until its own; a step seen again counts as a retry;
dead letters (events a service gave up on) are attached to their step.
"""

from typing import Any

from nats.aio.client import Client
from nats.js import JetStreamContext

from plnt_common import subjects
from plnt_common.bus.history import read_dead_letters, read_events


async def timeline(
    nc: Client, js: JetStreamContext, *, namespace: str, name: str
) -> dict[str, Any]:
    """``{"sagas": [{"sagaId", "start", "steps": [...]}], "deadLetters": n}``."""
    sagas: dict[str, dict[str, Any]] = {}
    last_at: dict[str, float] = {}
    async for stored in read_events(nc, filter_subject=subjects.run_filter(namespace, name)):
        event = stored.event
        if event is None:
            continue
        at = event.time.timestamp()
        saga = sagas.setdefault(event.sagaid, {"sagaId": event.sagaid, "start": at, "steps": {}})
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
                "sequence": stored.sequence,
            }
        else:
            row["retries"] += 1
            row["durationS"] = at - row["start"]
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
