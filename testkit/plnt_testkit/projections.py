"""The projection bucket as it is stored now, for checks that compare it with a replay."""

from nats.aio.client import Client

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
