"""``plnt history``'s DETAIL column of a walked rollout names the copy each canary event
acts on: its backend and that copy's own address, not the first backend's."""

from plnt_cli.commands import Session, history
from plnt_common.events import (
    CanaryInstalled,
    CanaryRef,
    EventType,
    SpreadRelease,
    new_event,
)
from plnt_testkit.events import WALKED_RUN as RUN

EAST = CanaryRef(
    revision="2.0.0-g2", release="wf-g2", url="http://east:1", backend="east", walk=("east", "west")
)
BOTH = EAST.model_copy(
    update={"spread": (SpreadRelease(backend="west", release="wf-g2-west", url="http://west:2"),)}
)


async def test_each_installed_copy_shows_its_own_backend_and_address(nats_url: str) -> None:
    session = await Session.open(nats_url)
    try:
        for canary, backend in ((EAST, "east"), (BOTH, "west")):
            event = new_event(
                EventType.CANARY_INSTALLED,
                CanaryInstalled(run=RUN, canary=canary, backend=backend),
                namespace="default",
                name="wf",
                sagaid="default.wf.2.1",
                generation=2,
                source="test",
            )
            await session.bus.publish(event, step=backend)

        timeline = await history(session, name="wf", namespace="default")
    finally:
        await session.close()

    installed = [line for line in timeline.splitlines() if "canary.installed" in line]
    assert [line.split("canary.installed")[1].strip() for line in installed] == [
        "http://east:1 on east",
        "http://west:2 on west",
    ], timeline
