"""Publishing to a 3-replica PLNT_EVENTS while its leader is killed: every publish is
retried with the same Nats-Msg-Id until the new leader stores it, exactly once."""

import asyncio
from collections import Counter

import pytest
from nats.errors import TimeoutError as NatsTimeout

from plnt_common import subjects
from plnt_common.bus.bus import Bus, message_id
from plnt_common.bus.history import read_events
from plnt_common.errors import BusUnavailable
from plnt_common.events import Envelope, RunSnapshot
from plnt_common.nats_server import NatsCluster
from plnt_common.resources import WorkflowRunSpec
from plnt_testkit.cluster import restart_node, stream_leader, wait_until_replicated
from plnt_testkit.events import run_requested

EVENTS = 400
IN_FLIGHT = 16


def requested(index: int) -> Envelope:
    spec = WorkflowRunSpec.model_validate(
        {
            "workflow": {"ref": "wf@1.0.0", "registry": "file:///registry"},
            "backend": {"cluster": "c"},
        }
    )
    return run_requested(
        RunSnapshot(namespace="default", name=f"run-{index}", generation=1, spec=spec)
    )


async def stored_ids(bus: Bus) -> Counter[str]:
    """Every stored event's id. The read's consumer is created right after the killed node
    rejoined, whose first answer can be a timeout (once, in a full run): that read is
    retried, a wrong count never is."""
    for attempt in range(3):
        ids: Counter[str] = Counter()
        try:
            async for message in read_events(bus.nc):
                assert message.event is not None
                ids[message_id(message.event)] += 1
        except (NatsTimeout, BusUnavailable):
            if attempt == 2:
                raise
            await asyncio.sleep(1)
            continue
        return ids
    raise AssertionError("unreachable")


async def test_publishes_retry_through_a_leader_election_and_are_stored_once(
    nats_cluster: NatsCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLNT_NATS_REPLICAS", "3")
    bus = await Bus.open(nats_cluster.url, service="test")
    try:
        events = [requested(index) for index in range(EVENTS)]
        slots = asyncio.Semaphore(IN_FLIGHT)

        async def publish(event: Envelope) -> bool:
            async with slots:
                return await bus.publish(event, deadline_s=60)

        publishing = asyncio.gather(*(publish(event) for event in events))
        leader = nats_cluster.node_named(await stream_leader(bus.js))
        await asyncio.sleep(0.05)
        leader.stop(kill=True)
        stored = await publishing  # raises if a publish gave up
        restart_node(leader)
        await wait_until_replicated(bus.js)

        assert all(stored), "a first publish was taken for a duplicate"
        ids = await stored_ids(bus)
        assert ids == Counter(message_id(event) for event in events)
        info = await bus.js.stream_info(subjects.STREAM)
        assert info.state.messages == info.state.last_seq == EVENTS
        # publishing all again changes nothing: the new leader knows every id
        assert not any(await asyncio.gather(*(publish(event) for event in events)))
    finally:
        await bus.close()
