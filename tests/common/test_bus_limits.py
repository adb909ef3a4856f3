"""Stream and bucket limits on a real nats-server: from settings, merged into what exists,
and a full store named in the error and written once room frees."""

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.js import api

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, Delivery, EventConsumer
from plnt_common.bus.kv_batch import bucket_stream
from plnt_common.bus.provision import WRITER_KEY, ensure_jetstream, plnt_version
from plnt_common.errors import BusFull
from plnt_common.events import Envelope, EventType, RunDeleted, new_event, saga_id
from plnt_common.settings import BusSettings, Limit
from plnt_testkit.configured_nats import configured_nats

DAY_S = 86_400.0
GIB = 2**30


def deleted(name: str, namespace: str = "default") -> Envelope:
    return new_event(
        EventType.RUN_DELETED,
        RunDeleted(),
        namespace=namespace,
        name=name,
        sagaid=saga_id(namespace, name, 1),
        generation=1,
        source="test",
    )


async def config_of(bus: Bus, stream: str) -> api.StreamConfig:
    return (await bus.js.stream_info(stream)).config


async def operator_sets(bus: Bus, stream: str, **fields: object) -> None:
    """What ``nats stream edit`` does."""
    config = await config_of(bus, stream)
    for field, value in fields.items():
        setattr(config, field, value)
    await bus.js.update_stream(config)


async def test_a_new_bus_has_the_limits_of_its_settings(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLNT_EVENTS_MAX_BYTES", "8MiB")
    monkeypatch.setenv("PLNT_BUCKETS_MAX_BYTES", "1MiB")
    bus = await Bus.open(nats_url, service="test")
    events = await config_of(bus, subjects.STREAM)
    assert events.max_age == 30 * DAY_S  # PLNT_EVENTS_MAX_AGE's default
    assert events.max_bytes == 8 * 2**20
    assert events.discard == api.DiscardPolicy.OLD  # at its limit the oldest go, never a saga
    assert (events.metadata or {}).get(WRITER_KEY) == plnt_version()
    for bucket in (subjects.RUNS_BUCKET, subjects.ROUTES_BUCKET, subjects.SAGAS_BUCKET):
        assert (await config_of(bus, bucket_stream(bucket))).max_bytes == 2**20, bucket
    assert (await config_of(bus, bucket_stream(subjects.SAGAS_BUCKET))).max_age == 30 * DAY_S
    assert not (await config_of(bus, bucket_stream(subjects.RUNS_BUCKET))).max_age
    assert (await config_of(bus, f"OBJ_{subjects.SPECS_OBJECT_STORE}")).max_bytes == 2**20
    for stream in (bucket_stream(subjects.RUNS_BUCKET), f"OBJ_{subjects.SPECS_OBJECT_STORE}"):
        assert ((await config_of(bus, stream)).metadata or {}).get(WRITER_KEY) == plnt_version()
    await bus.close()


async def test_limits_an_operator_set_survive_every_start(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    await operator_sets(bus, subjects.STREAM, max_age=90 * DAY_S, max_bytes=8 * GIB)
    await operator_sets(bus, bucket_stream(subjects.RUNS_BUCKET), max_bytes=GIB)
    for _ in range(2):  # services starting again, with none of the settings given
        again = await Bus.open(nats_url, service="test")
        await again.close()
    events = await config_of(bus, subjects.STREAM)
    assert (events.max_age, events.max_bytes) == (90 * DAY_S, 8 * GIB), "a start reset them"
    assert events.subjects == list(subjects.STREAM_SUBJECTS)
    assert (await config_of(bus, bucket_stream(subjects.RUNS_BUCKET))).max_bytes == GIB
    await bus.close()


async def test_a_stream_without_limits_gets_the_default_age_and_a_setting_given_wins(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus = await Bus.open(nats_url, service="test")
    await operator_sets(bus, subjects.STREAM, max_age=0, max_bytes=-1)  # as plnt made it before
    await ensure_jetstream(bus.js, limits=BusSettings())
    assert (await config_of(bus, subjects.STREAM)).max_age == 30 * DAY_S
    monkeypatch.setenv("PLNT_EVENTS_MAX_AGE", "7d")
    monkeypatch.setenv("PLNT_EVENTS_MAX_BYTES", "2GiB")
    again = await Bus.open(nats_url, service="test")
    events = await config_of(bus, subjects.STREAM)
    assert (events.max_age, events.max_bytes) == (7 * DAY_S, 2 * GIB)
    await again.close()
    await bus.close()


async def test_an_older_plnt_leaves_a_newer_one_s_stream_configuration(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus = await Bus.open(nats_url, service="test")
    newer = BusSettings(events_max_age_s=Limit(7 * DAY_S, explicit=True))
    await ensure_jetstream(bus.js, limits=newer, version="99.0.0")
    monkeypatch.setenv("PLNT_EVENTS_MAX_AGE", "1d")
    again = await Bus.open(nats_url, service="test")  # this version, older than 99.0.0
    events = await config_of(bus, subjects.STREAM)
    assert events.max_age == 7 * DAY_S
    assert (events.metadata or {}).get(WRITER_KEY) == "99.0.0"
    await again.close()
    await bus.close()


async def fill(bus: Bus, stream: str) -> None:
    """Limit ``stream`` to what it holds now plus a little, refusing what does not fit
    (as a full disk does)."""
    await operator_sets(bus, stream, max_bytes=4096, discard=api.DiscardPolicy.NEW)


async def publish_until_full(bus: Bus, namespace: str = "fill", size: int = 0) -> None:
    """Publish to the events stream until it refuses: raises ``BusFull`` then. Each event
    carries ``size`` KiB more in its source."""
    for index in range(1000):
        event = deleted(f"filler-{index}", namespace=namespace)
        event = event.model_copy(update={"source": "x" * 1024 * size or "test"})
        await bus.publish(event, deadline_s=0.5)
    raise AssertionError("the stream never filled")


async def test_a_full_event_stream_is_named_with_its_setting_and_a_publish_lands_once_room_frees(
    bus: Bus,
) -> None:
    await fill(bus, subjects.STREAM)
    with pytest.raises(BusFull, match=r"PLNT_EVENTS is full .*raise PLNT_EVENTS_MAX_BYTES"):
        await publish_until_full(bus)
    publishing = asyncio.create_task(bus.publish(deleted("late"), deadline_s=30))
    await asyncio.sleep(1.0)
    assert not publishing.done(), "a publish to a full stream gave up at once"
    await bus.js.purge_stream(subjects.STREAM)  # room frees
    assert await asyncio.wait_for(publishing, timeout=30) is True


async def test_a_full_saga_bucket_refuses_a_terminal_claim_naming_the_bucket(bus: Bus) -> None:
    await fill(bus, bucket_stream(subjects.SAGAS_BUCKET))
    with pytest.raises(BusFull, match=r"plnt-sagas is full .*raise PLNT_BUCKETS_MAX_BYTES"):
        await claim_until_full(bus)


async def claim_until_full(bus: Bus) -> None:
    for index in range(100):
        await bus.publish_terminal(deleted(f"t{index}"))
    raise AssertionError("the bucket never filled")


async def test_a_step_failing_on_a_full_stream_names_it_and_its_failure_lands_once_room_frees(
    bus: Bus,
) -> None:
    await bus.publish(deleted("step"))
    await fill(bus, subjects.STREAM)
    with pytest.raises(BusFull):
        await publish_until_full(bus)
    reasons: list[str] = []
    recorded = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        await bus.publish(deleted(f"{event.name}-outcome"), deadline_s=0.2)

    exhausted = asyncio.Event()

    async def on_exhausted(event: Envelope, exc: BaseException) -> None:
        reasons.append(str(exc))
        exhausted.set()
        await bus.publish(deleted(f"{event.name}-failed"), deadline_s=0.2)
        recorded.set()  # the failure event names the last reason (a real service's run.failed)

    spec = ConsumerSpec(
        service="full",
        filters=(subjects.run_filter("default", "step"),),
        max_attempts=2,
        backoff_s=(0.2, 0.5),
    )
    stop = asyncio.Event()
    running = asyncio.create_task(EventConsumer(bus, spec, handler, on_exhausted).run(stop))
    try:
        await asyncio.wait_for(exhausted.wait(), timeout=20)
        await asyncio.sleep(1.0)
        assert not recorded.is_set(), "a failure was recorded in a full stream"
        await bus.js.purge_stream(subjects.STREAM, subject=f"{subjects.SUBJECT_PREFIX}.*.*.fill.>")
        await asyncio.wait_for(recorded.wait(), timeout=30)
    finally:
        stop.set()
        await asyncio.wait_for(running, timeout=10)
    # every attempt to record the failure, the one that landed too, says why the step failed
    assert len(reasons) >= 2
    assert all("PLNT_EVENTS is full" in reason for reason in reasons), reasons


@pytest.fixture
def small_server(tmp_path: Path) -> Iterator[str]:
    """A nats-server whose JetStream may store 256 KB: full, it answers as a full disk does
    ('insufficient resources')."""
    with configured_nats(
        tmp_path, f'jetstream {{ store_dir: "{tmp_path / "js"}", max_file_store: 256KB }}'
    ) as url:
        yield url


async def test_a_server_out_of_storage_is_named_and_a_publish_lands_once_room_frees(
    small_server: str,
) -> None:
    bus = await Bus.open(small_server, service="test")
    with pytest.raises(BusFull, match=r"PLNT_EVENTS is full \(insufficient resources\)"):
        await publish_until_full(bus, size=1)
    publishing = asyncio.create_task(bus.publish(deleted("late"), deadline_s=30))
    await asyncio.sleep(1.0)
    assert not publishing.done(), "a publish to a full server gave up at once"
    await bus.js.purge_stream(subjects.STREAM)  # room frees
    assert await asyncio.wait_for(publishing, timeout=30) is True
    await bus.close()
