"""The saga progress `plnt demo` prints: a line for every event a run's saga publishes."""

import asyncio

import pytest

from plnt_cli.progress import STEP_LABELS, SagaFollower, describe
from plnt_common.events import (
    BackendAwaited,
    CanaryRef,
    CanaryStepped,
    Envelope,
    EventType,
    RunReady,
    new_event,
)
from plnt_common.resources import Canary


def _event(kind: EventType, data: object) -> Envelope:
    return new_event(
        kind,
        data,  # type: ignore[arg-type]
        namespace="default",
        name="wf",
        sagaid="default.wf.1.1",
        generation=1,
        source="test",
    )


class _Msg:
    def __init__(self, event: Envelope) -> None:
        self.data = event.model_dump_json().encode()


@pytest.mark.parametrize("kind", list(EventType), ids=lambda kind: kind.value)
def test_every_event_of_a_saga_has_a_line(kind: EventType) -> None:
    assert STEP_LABELS[kind]


async def test_a_stepped_canary_and_a_wait_are_followed_to_the_end() -> None:
    said: list[str] = []
    follower = SagaFollower(namespace="default", name="wf", say=said.append)
    canary = CanaryRef(revision="1.0.0-g1", release="wf-g1", url="http://127.0.0.1:1")
    plan = Canary(steps=[10, 50])
    events = [
        _event(
            EventType.CANARY_STEPPED,
            CanaryStepped(canary=canary, plan=plan, step=1, traffic_percent=10, hold_s=2),
        ),
        _event(
            EventType.BACKEND_AWAITED,
            BackendAwaited(backends=("gpu-far",), message="waiting for the API of gpu-far"),
        ),
        _event(EventType.RUN_READY, RunReady(revision="1.0.0-g1", endpoint="http://r/wf")),
    ]
    for event in events:
        await follower._on_message(_Msg(event))  # type: ignore[arg-type]

    await asyncio.wait_for(follower.finished.wait(), 1)
    assert len(said) == 3
    assert "canary.stepped" in said[0]
    assert said[1].endswith("waiting for a silent PlntBackend: waiting for the API of gpu-far")
    assert describe(events[2]) == "Ready: all traffic on the new revision 1.0.0-g1"
