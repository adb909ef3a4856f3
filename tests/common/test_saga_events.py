"""Reading back a run's last event of a type, against a real nats-server."""

import dataclasses

import pytest

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.saga_events import last_of_run, last_of_saga
from plnt_common.events import EventType, RunSnapshot
from plnt_common.resources import WorkflowRunSpec
from plnt_testkit.events import run_requested

SPEC = WorkflowRunSpec.model_validate(
    {"workflow": {"ref": "wf@1.0.0", "registry": "file:///registry"}, "backend": {"cluster": "c"}}
)


def snapshot(name: str, generation: int) -> RunSnapshot:
    return RunSnapshot(namespace="ns", name=name, uid="u", generation=generation, spec=SPEC)


async def test_the_events_stream_of_one_node_answers_direct_gets(bus: Bus) -> None:
    assert bus.events_direct
    assert (await bus.js.stream_info(subjects.STREAM)).config.allow_direct


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "through-the-leader"])
async def test_a_run_s_last_event_of_a_type_is_read_back_either_way(bus: Bus, direct: bool) -> None:
    if not direct:  # as on a cluster: the stream serves no direct gets
        config = (await bus.js.stream_info(subjects.STREAM)).config
        config.allow_direct = False
        await bus.js.update_stream(config)
    reading = dataclasses.replace(bus, events_direct=direct)
    name = f"readback-{direct}"
    first, second = run_requested(snapshot(name, 1)), run_requested(snapshot(name, 2))
    for event in (first, second):
        await bus.publish(event)
    assert await last_of_run(reading, EventType.RUN_REQUESTED, "ns", name) == second
    assert await last_of_saga(reading, EventType.RUN_REQUESTED, second) == second
    assert await last_of_saga(reading, EventType.RUN_REQUESTED, first) is None  # a later saga's
    assert await last_of_run(reading, EventType.RUN_READY, "ns", name) is None
