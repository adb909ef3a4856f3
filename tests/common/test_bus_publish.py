"""Publishing on a real nats-server: one message id per saga step, and closing."""

from plnt_common import subjects
from plnt_common.bus.bus import Bus, message_id
from plnt_common.events import Envelope, EventType, RunDeleted, new_event, saga_id


def deleted(name: str) -> Envelope:
    return new_event(
        EventType.RUN_DELETED,
        RunDeleted(),
        namespace="default",
        name=name,
        sagaid=saga_id("default", name, 1),
        generation=1,
        source="test",
    )


def test_a_message_id_is_the_saga_and_the_type_plus_the_step_when_given() -> None:
    event = deleted("ids")
    assert message_id(event) == "default.ids.1.1.run.deleted"
    assert message_id(event, "2") == "default.ids.1.1.run.deleted.2"


async def test_each_step_of_one_type_is_stored_once_under_its_own_id(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    event = deleted("steps")
    assert await bus.publish(event) is True
    assert await bus.publish(event, step="2") is True
    assert await bus.publish(event, step="2") is False
    ids = []
    for sequence in (1, 2):
        stored = await bus.js.get_msg(subjects.STREAM, sequence)
        ids.append((stored.headers or {}).get("Nats-Msg-Id"))
    assert ids == ["default.steps.1.1.run.deleted", "default.steps.1.1.run.deleted.2"]
    assert (await bus.js.stream_info(subjects.STREAM)).state.messages == 2
    await bus.close()


async def test_closing_drains_the_connection_once(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    await bus.close()
    assert bus.nc.is_closed
    await bus.close()  # a second close finds it closed and does nothing
