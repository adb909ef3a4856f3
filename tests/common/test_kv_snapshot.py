"""Reading a bucket's live keys at once, against a real nats-server."""

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.kv_snapshot import kv_snapshot


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
