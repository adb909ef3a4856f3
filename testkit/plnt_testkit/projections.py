"""The projection bucket as it is stored now, for checks that compare it with a replay."""

import asyncio

import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import ServiceUnavailableError

from plnt_common import subjects
from plnt_common.bus.kv_snapshot import kv_snapshot
from plnt_common.projection import RunProjection


async def stored_projections(nc: Client) -> dict[str, RunProjection]:
    """Every run's projection in ``plnt-runs``, by key.

    Read with ``kv_snapshot``, not nats-py's ``KeyValue.keys()``: its listing can end
    before what it lists.
    """
    snapshot = await kv_snapshot(nc, subjects.RUNS_BUCKET)
    return {
        key: RunProjection.model_validate_json(value)
        for key, (_, value) in snapshot.items()
        if value
    }


async def watcher_caught_up(js: JetStreamContext, *, timeout_s: float = 60.0) -> None:
    """Until the watcher has folded every stored event: its durable consumer's ack floor
    reached the stream's last message and nothing it was given is unacked.

    A projection compared with a replay before this may simply lag the stream (a run's
    removal still on its way, a redelivery after a kill). On a cluster a node back from
    a pause or a restart answers 503 (or not at all) while the consumer's leader is
    elected again: that is waited out too. Raises ``AssertionError`` naming what is left
    after ``timeout_s``.
    """
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            last = (await js.stream_info(subjects.STREAM)).state.last_seq
            consumer = await js.consumer_info(subjects.STREAM, subjects.durable_name("watcher"))
        except (ServiceUnavailableError, nats.errors.TimeoutError) as exc:
            left = f"the consumer's info: {exc!r}"
        else:
            if consumer.ack_floor.stream_seq >= last and not consumer.num_ack_pending:
                return
            left = (
                f"the watcher acked up to {consumer.ack_floor.stream_seq} of {last} events, "
                f"{consumer.num_ack_pending} unacked"
            )
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{left}, after {timeout_s}s")
        await asyncio.sleep(0.1)


def projection_change(key: str, live: RunProjection | None, replayed: RunProjection | None) -> str:
    """What a replay changed in ``key``'s projection, field by field."""
    old = live.model_dump(mode="json") if live else {}
    new = replayed.model_dump(mode="json") if replayed else {}
    fields = {
        f: (old.get(f), new.get(f)) for f in old.keys() | new.keys() if old.get(f) != new.get(f)
    }
    return f"{key}: live → replayed {fields}"
