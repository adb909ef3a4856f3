"""Reading a bucket's live keys at once, against a real nats-server."""

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.kv_batch import bucket_stream
from plnt_common.bus.kv_snapshot import InitialValues, kv_snapshot


async def test_an_empty_bucket_lists_nothing(bus: Bus) -> None:
    assert await kv_snapshot(bus.nc, subjects.RELEASES_BUCKET) == {}


async def test_the_latest_value_of_each_live_key_matching_the_filter(bus: Bus) -> None:
    kv = bus.releases
    await kv.put("desired.a.one", b"first")
    await kv.put("desired.a.one", b"second")
    await kv.put("desired.a.two", b"2")
    await kv.put("desired.b.three", b"3")
    await kv.put("desired.a.deleted", b"x")
    await kv.delete("desired.a.deleted")
    await kv.put("desired.a.purged", b"x")
    await kv.purge("desired.a.purged")
    await kv.put("observed.a.one", b"o")

    listed = await kv_snapshot(bus.nc, subjects.RELEASES_BUCKET, "desired.a.*")
    assert {key: value for key, (_, value) in listed.items()} == {
        "desired.a.one": b"second",
        "desired.a.two": b"2",
    }
    latest = await kv.get("desired.a.one")
    assert listed["desired.a.one"][0] == latest.revision
    everything = await kv_snapshot(bus.nc, subjects.RELEASES_BUCKET)
    assert set(everything) == {
        "desired.a.one",
        "desired.a.two",
        "desired.b.three",
        "observed.a.one",
    }


async def test_a_bucket_larger_than_one_batch_is_listed_whole(bus: Bus) -> None:
    for i in range(2500):
        await bus.runs.put(f"ns.run-{i}", b"p")
    listed = await kv_snapshot(bus.nc, subjects.RUNS_BUCKET)
    assert len(listed) == 2500


async def test_a_bucket_keeping_history_lists_each_live_key_once_at_its_latest(bus: Bus) -> None:
    kv = await bus.js.create_key_value(bucket="kept-history", history=5)
    await kv.put("kept", b"first")
    latest = await kv.put("kept", b"second")
    await kv.put("deleted", b"x")
    await kv.delete("deleted")
    await kv.put("purged", b"x")
    await kv.purge("purged")

    assert await kv_snapshot(bus.nc, "kept-history") == {"kept": (latest, b"second")}


async def test_a_listing_leaves_no_consumer_on_the_server(bus: Bus) -> None:
    await bus.runs.put("ns.run", b"p")
    await kv_snapshot(bus.nc, subjects.RUNS_BUCKET)
    info = await bus.js.stream_info(bucket_stream(subjects.RUNS_BUCKET))
    assert info.state.consumer_count == 0


def test_initial_values_of_an_empty_listing_are_complete_at_the_marker() -> None:
    initial = InitialValues({})
    assert not initial.saw("unlisted", 3)
    assert initial.saw(None)


def test_initial_values_wait_for_the_marker_and_each_listed_key_at_its_revision() -> None:
    initial = InitialValues({"a": (5, b"a"), "b": (7, b"b")})
    assert not initial.saw("a", 4)  # older than listed: its listed value is still coming
    assert not initial.saw(None)
    assert not initial.saw("a", 5)
    assert not initial.saw("unlisted", 9)
    assert initial.saw("b", 8)  # a change after the listing counts as seen


def test_initial_values_seen_before_the_marker_are_complete_at_the_marker() -> None:
    initial = InitialValues({"a": (2, b"a")})
    assert not initial.saw("a", 2)
    assert initial.saw(None)
