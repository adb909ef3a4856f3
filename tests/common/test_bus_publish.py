"""Publishing on a real nats-server: one message id per saga step, and closing."""

import asyncio
import signal

import pytest
import structlog.testing

from plnt_common import subjects
from plnt_common.bus.bus import PUBLISH_RETRY_DELAYS_S, Bus, message_id
from plnt_common.bus.provision import ensure_jetstream
from plnt_common.errors import BusUnavailable
from plnt_common.events import Envelope, EventType, RunDeleted, new_event, saga_id
from plnt_common.nats_server import NatsServer
from plnt_testkit.tcp_proxy import FaultProxy

RETRIED_ERRORS = {
    "TimeoutError",
    "NoRespondersError",
    "NoStreamResponseError",
    "ServiceUnavailableError",
    "ConnectionClosedError",
}


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


async def test_a_duplicate_is_logged_with_its_message_id(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    event = deleted("dup")
    await bus.publish(event)
    with structlog.testing.capture_logs() as logs:
        assert await bus.publish(event) is False
    assert [(line["event"], line.get("msg_id"), line.get("own")) for line in logs] == [
        ("bus.duplicate_dropped", "default.dup.1.1.run.deleted", False)  # another's store
    ]
    await bus.close()


async def test_a_duplicate_after_a_timed_out_attempt_is_the_publishs_own_store(
    nats_server: NatsServer,
) -> None:
    """The server stored the first attempt and its answer came too late (a leader killed
    before answering does the same): the retry's "duplicate" is this call's store."""
    async with FaultProxy("127.0.0.1", nats_server.port) as proxy:
        bus = await Bus.open(f"nats://127.0.0.1:{proxy.port}", service="test")
        proxy.mode, proxy.delay_s = "slow", 3.0  # past the first attempt's 2 s wait
        with structlog.testing.capture_logs() as logs:
            publishing = asyncio.create_task(bus.publish(deleted("late-ack")))
            await asyncio.sleep(2.4)
            retried = [line["error"] for line in logs if line["event"] == "bus.publish_retry"]
            assert retried and retried[0].startswith("TimeoutError")
            proxy.mode = "pass"
            assert await asyncio.wait_for(publishing, timeout=10) is True
        await bus.close()
    dropped = [line for line in logs if line["event"] == "bus.duplicate_dropped"]
    assert [line["own"] for line in dropped] == [True]
    check = await Bus.open(nats_server.url, service="check")
    assert (await check.js.stream_info(subjects.STREAM)).state.messages == 1
    await check.close()


async def test_a_publish_retries_through_an_outage_and_is_stored_once(
    nats_server: NatsServer,
) -> None:
    bus = await Bus.open(nats_server.url, service="test")
    nats_server.stop(kill=True)
    with structlog.testing.capture_logs() as logs:
        publishing = asyncio.create_task(bus.publish(deleted("outage"), deadline_s=30))
        await asyncio.sleep(1.5)
        assert not publishing.done()
        nats_server.start()
        assert await asyncio.wait_for(publishing, timeout=30) is True
    assert (await bus.js.stream_info(subjects.STREAM)).state.messages == 1
    retries = [line for line in logs if line["event"] == "bus.publish_retry"]
    assert [line["attempt"] for line in retries] == list(range(1, len(retries) + 1))
    # each names the subject and the error of that attempt (one the publish retries)
    assert retries and all(
        line["subject"] == "plnt.evt.run.deleted.default.outage"
        and line["error"].split("(")[0] in RETRIED_ERRORS
        for line in retries
    ), retries
    await bus.close()


async def test_a_publish_gives_up_at_its_deadline_naming_what_failed(
    nats_server: NatsServer,
) -> None:
    bus = await Bus.open(nats_server.url, service="test")
    nats_server.stop(kill=True)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(BusUnavailable, match=r"publishing plnt\.evt\.run\.deleted\.default\.late"):
        await bus.publish(deleted("late"), deadline_s=1.0)
    assert 0.9 <= loop.time() - started < 10
    nats_server.start()
    await bus.reconnects.next()  # a bus closes once it is connected again
    await bus.close()


async def test_the_bus_binds_each_bucket_of_the_contract_by_its_name(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="binder")
    buckets = {
        "runs": subjects.RUNS_BUCKET,
        "routes": subjects.ROUTES_BUCKET,
        "resources": subjects.RESOURCES_BUCKET,
        "releases": subjects.RELEASES_BUCKET,
        "sagas": subjects.SAGAS_BUCKET,
    }
    for attribute, name in buckets.items():
        await getattr(bus, attribute).put("probe", attribute.encode())
        read = await (await bus.js.key_value(name)).get("probe")
        assert read.value == attribute.encode(), name
    await bus.specs.put("probe", b"spec")
    stored = await (await bus.js.object_store(subjects.SPECS_OBJECT_STORE)).get("probe")
    assert stored.data == b"spec"
    await bus.close()


async def test_a_publish_backs_off_while_no_stream_takes_it_and_lands_once_it_is_back(
    bus: Bus,
) -> None:
    await bus.js.delete_stream(subjects.STREAM)  # every attempt: no responders, at once
    with structlog.testing.capture_logs() as logs:
        publishing = asyncio.create_task(bus.publish(deleted("nostream"), deadline_s=30))
        await asyncio.sleep(4.5)  # past the back-off's longest delay
        assert not publishing.done()
        await ensure_jetstream(bus.js)
        assert await asyncio.wait_for(publishing, timeout=30) is True
    assert (await bus.js.stream_info(subjects.STREAM)).state.messages == 1
    retries = [line for line in logs if line["event"] == "bus.publish_retry"]
    attempts = [line["attempt"] for line in retries]
    assert len(attempts) > len(PUBLISH_RETRY_DELAYS_S)  # the longest delay repeated
    assert attempts == list(range(1, len(attempts) + 1))
    longest = PUBLISH_RETRY_DELAYS_S[-1]
    repeated = len(retries) - len(PUBLISH_RETRY_DELAYS_S)
    assert [line["delay_s"] for line in retries] == [*PUBLISH_RETRY_DELAYS_S, *[longest] * repeated]


async def test_a_publish_to_a_server_that_stopped_answering_gives_up_at_its_deadline(
    nats_server: NatsServer,
) -> None:
    bus = await Bus.open(nats_server.url, service="test")
    assert nats_server.process is not None
    nats_server.process.send_signal(signal.SIGSTOP)  # connected, but no acknowledgement comes
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(BusUnavailable, match=r"publishing .* failed for 0\.5s"):
            await bus.publish(deleted("stalled"), deadline_s=0.5)
        assert loop.time() - started < 1.5  # not an attempt's whole wait past the deadline
    finally:
        nats_server.process.send_signal(signal.SIGCONT)
    await bus.close()
