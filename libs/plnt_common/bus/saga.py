"""Observing a saga's state on the bus: its run's projection and its terminal claim."""

import asyncio

from nats.js.errors import KeyDeletedError, KeyNotFoundError

from plnt_common.bus.bus import Bus
from plnt_common.events import Envelope
from plnt_common.projection import RunProjection
from plnt_common.saga import SagaState, classify


async def read_projection(bus: Bus, namespace: str, name: str) -> RunProjection | None:
    try:
        entry = await bus.runs.get(f"{namespace}.{name}")
    except (KeyNotFoundError, KeyDeletedError):
        return None
    return RunProjection.model_validate_json(entry.value) if entry.value else None


async def observe_saga(bus: Bus, event: Envelope) -> SagaState:
    # both reads at once: one round trip of latency on every saga step
    projection, ended = await asyncio.gather(
        read_projection(bus, event.namespace, event.name), bus.saga_ended(event.sagaid)
    )
    return classify(event, projection, ended)
