"""A rolling upgrade on a real nats-server: replicas of two plnt versions share a durable.

The newest version's consumer configuration stays, whichever replica binds last, and an
event of a type the older version does not know is left for the newer one, never
terminated. The version is what ``plnt_version`` gives; the tests set it.
"""

import asyncio
import json

import pytest
from nats.js import api

from plnt_common import subjects
from plnt_common.bus import consumer as consumer_module
from plnt_common.bus import provision
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, Delivery, EventConsumer
from plnt_common.bus.history import read_dead_letters
from plnt_common.events import Envelope, EventType

OLD, NEW = "0.1.0", "0.2.0"
SERVICE = "upgrade"
OLD_FILTERS = (subjects.event_filter(EventType.RUN_REQUESTED),)
NEW_FILTERS = (*OLD_FILTERS, subjects.event_filter(EventType.RUN_DELETED))


def spec(filters: tuple[str, ...], ack_wait_s: float) -> ConsumerSpec:
    return ConsumerSpec(service=SERVICE, filters=filters, ack_wait_s=ack_wait_s)


async def bind(bus: Bus, consumer_spec: ConsumerSpec, version: str, monkeypatch) -> None:
    """One replica of ``version`` binding the shared durable, as it does at start."""
    monkeypatch.setattr(provision, "plnt_version", lambda: version)

    async def never(event: Envelope, delivery: Delivery) -> None:
        raise AssertionError("not consumed here")

    async def nothing(event: Envelope, exc: BaseException) -> None:
        return None

    await EventConsumer(bus, consumer_spec, never, nothing).ensure_consumer()


async def durable(bus: Bus) -> api.ConsumerConfig:
    return (await bus.js.consumer_info(subjects.STREAM, subjects.durable_name(SERVICE))).config


def filters_of(config: api.ConsumerConfig) -> tuple[str, ...]:
    return tuple(sorted(config.filter_subjects or [config.filter_subject or ""]))


async def test_an_older_replica_binding_after_a_newer_one_leaves_its_filters_and_ack_wait(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    await bind(bus, spec(OLD_FILTERS, 30), OLD, monkeypatch)
    await bind(bus, spec(NEW_FILTERS, 120), NEW, monkeypatch)
    for _ in range(2):  # old and new replicas restarting in turn
        await bind(bus, spec(OLD_FILTERS, 30), OLD, monkeypatch)
        config = await durable(bus)
        assert filters_of(config) == tuple(sorted(NEW_FILTERS)), "an older version narrowed it"
        assert config.ack_wait == 120, "an older version set its ack wait back"
        assert (config.metadata or {}).get(provision.WRITER_KEY) == NEW
        await bind(bus, spec(NEW_FILTERS, 120), NEW, monkeypatch)
    # a yet newer version changes it again
    await bind(bus, spec(NEW_FILTERS, 60), "0.3.0", monkeypatch)
    config = await durable(bus)
    assert config.ack_wait == 60
    assert (config.metadata or {}).get(provision.WRITER_KEY) == "0.3.0"


async def test_a_durable_is_rewritten_only_when_its_configuration_differs(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    await bind(bus, spec(NEW_FILTERS, 120), NEW, monkeypatch)
    written = []
    add_consumer = bus.js.add_consumer

    async def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        written.append(args)
        return await add_consumer(*args, **kwargs)

    monkeypatch.setattr(bus.js, "add_consumer", counted)
    await bind(bus, spec(NEW_FILTERS, 120), NEW, monkeypatch)
    await bind(bus, spec(tuple(reversed(NEW_FILTERS)), 120), NEW, monkeypatch)
    assert written == [], "an unchanged configuration was written again"
    await bind(bus, spec(NEW_FILTERS, 90), NEW, monkeypatch)
    assert len(written) == 1


def newer_event(name: str) -> bytes:
    """An event of a type this version does not know, as a newer plnt would publish it."""
    return json.dumps(
        {
            "specversion": "1.0",
            "id": "e1",
            "type": "work.plnt.canary.paused",
            "source": "/plnt/promoter",
            "subject": f"default/{name}",
            "time": "2026-12-04T10:00:00Z",
            "datacontenttype": "application/json",
            "sagaid": f"default.{name}.1.1",
            "generation": 1,
            "causationid": "",
            "data": {"weight": 10},
        }
    ).encode()


async def test_an_event_of_a_type_an_older_replica_does_not_know_is_left_for_a_newer_one(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consumer_module, "UNKNOWN_TYPE_DELAY_S", 0.5)
    every_event = (f"{subjects.SUBJECT_PREFIX}.>",)
    await bind(bus, spec(every_event, 30), NEW, monkeypatch)
    ack = await bus.js.publish(
        f"{subjects.SUBJECT_PREFIX}.canary.paused.default.a", newer_event("a")
    )
    handled: list[Envelope] = []

    async def handler(event: Envelope, delivery: Delivery) -> None:
        handled.append(event)

    async def on_exhausted(event: Envelope, exc: BaseException) -> None:
        raise AssertionError(f"exhausted: {exc}")

    old = EventConsumer(bus, spec(every_event, 30), handler, on_exhausted)
    stop = asyncio.Event()
    running = asyncio.create_task(old.run(stop))
    await asyncio.sleep(2.0)  # the old replica sees it a few times
    stop.set()
    await asyncio.wait_for(running, timeout=10)
    assert handled == []
    assert await read_dead_letters(bus.js, namespace="default", name="a") == [], (
        "the old replica terminated an event of a newer type"
    )
    info = await bus.js.consumer_info(subjects.STREAM, subjects.durable_name(SERVICE))
    assert info.num_redelivered >= 1, "the old replica never took the event"
    # a newer replica of the same durable gets it
    newer = await bus.js.pull_subscribe_bind(
        durable=subjects.durable_name(SERVICE), stream=subjects.STREAM
    )
    (msg,) = await newer.fetch(1, timeout=5)
    assert msg.metadata.sequence.stream == ack.seq
    await msg.ack()
