"""The desired-state watch hands the initial values over whole, against a real nats-server."""

import asyncio
from collections.abc import Mapping
from typing import Any

from plnt_common.bus.bus import Bus
from plnt_common.releases import DesiredRelease, desired_key
from plnt_common.tasks import cancelled
from plnt_local_backend.adapters.desired_watch import DesiredWatch
from plnt_local_backend.logic import ReleaseKey
from plnt_testkit.early_marker import MarkFirst


class RecordingSink:
    def __init__(self) -> None:
        self.snapshots: list[set[str]] = []
        self.handed_over = asyncio.Event()

    async def replace_all(
        self, desired: Mapping[ReleaseKey, DesiredRelease], *, unreadable: frozenset[ReleaseKey]
    ) -> None:
        self.snapshots.append({key.release for key in desired})
        self.handed_over.set()

    async def apply(self, key: ReleaseKey, desired: DesiredRelease | None) -> None:
        return None


def release(name: str) -> DesiredRelease:
    return DesiredRelease(
        namespace="default",
        run_name="wf",
        release=name,
        revision="1.0.0-g1",
        saga_id="default.wf.1.1",
        spec_digest="sha256:" + "a" * 64,
        workflow_name="wf",
    )


async def test_an_early_end_of_initial_values_does_not_hand_over_an_empty_state(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    for name in ("wf-g1", "wf-g2"):
        await bus.releases.put(
            desired_key("default", name), release(name).model_dump_json().encode()
        )
    real_watch = bus.releases.watch

    async def watch_marking_first(keys: str, **options: Any) -> MarkFirst:
        return MarkFirst(await real_watch(keys, **options))

    bus.releases.watch = watch_marking_first  # type: ignore[method-assign]
    sink = RecordingSink()
    task = asyncio.create_task(DesiredWatch(nc=bus.nc, kv=bus.releases, sink=sink).run())
    try:
        await asyncio.wait_for(sink.handed_over.wait(), timeout=10)
    finally:
        await cancelled(task)
    assert sink.snapshots == [{"wf-g1", "wf-g2"}]
    await bus.close()
