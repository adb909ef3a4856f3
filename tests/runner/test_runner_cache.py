"""The LRU step cache and the admission queue: pure asyncio, no I/O."""

import asyncio

import pytest
from prometheus_client import REGISTRY

from plnt_common.admission import Saturated
from plnt_runner.admission import Admission
from plnt_runner.cache import StepCache


def test_cache_evicts_the_least_recently_used_entry_when_full() -> None:
    cache = StepCache(max_entries=2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == (True, 1)  # "a" is now the most recent
    cache.put("c", 3)

    assert cache.get("b") == (False, None)
    assert cache.get("a") == (True, 1)
    assert cache.get("c") == (True, 3)
    assert len(cache) == 2


def test_cache_hit_rate_counts_hits_over_lookups() -> None:
    cache = StepCache(max_entries=4)
    assert cache.hit_rate == 0.0
    cache.put("k", {"x": 1})
    for key in ("k", "k", "k", "missing"):
        cache.get(key)
    assert cache.hit_rate == 0.75
    assert cache.stats() == {
        "entries": 1,
        "max_entries": 4,
        "hits": 3,
        "misses": 1,
        "hit_rate": 0.75,
    }


def test_cache_refuses_a_size_below_one() -> None:
    with pytest.raises(ValueError, match="at least one"):
        StepCache(max_entries=0)


def _depth() -> float | None:
    return REGISTRY.get_sample_value("plnt_queue_depth", {"component": "runner"})


async def test_admission_runs_up_to_the_limit_queues_the_next_and_refuses_beyond() -> None:
    admission = Admission(max_in_flight=2, max_queue=1)
    release = asyncio.Event()
    order: list[int] = []

    async def call(n: int) -> None:
        async with admission.slot():
            order.append(n)
            await release.wait()

    running = [asyncio.create_task(call(n)) for n in (1, 2, 3)]
    await asyncio.sleep(0.01)
    assert (admission.in_flight, admission.waiting) == (2, 1)
    assert _depth() == 1
    with pytest.raises(Saturated):
        async with admission.slot():
            pytest.fail("a saturated admission let a caller in")

    release.set()
    await asyncio.gather(*running)
    assert order == [1, 2, 3]
    assert (admission.in_flight, admission.waiting) == (0, 0)
    assert _depth() == 0


async def test_admission_waiters_are_served_first_come_first_served() -> None:
    admission = Admission(max_in_flight=1, max_queue=10)
    order: list[int] = []
    gate = asyncio.Event()

    async def call(n: int) -> None:
        async with admission.slot():
            order.append(n)
            await gate.wait()

    tasks = []
    for n in range(5):
        tasks.append(asyncio.create_task(call(n)))
        await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]


async def test_a_cancelled_waiter_leaves_the_queue_and_takes_no_slot() -> None:
    admission = Admission(max_in_flight=1, max_queue=2)
    gate = asyncio.Event()

    async def hold() -> None:
        async with admission.slot():
            await gate.wait()

    holder = asyncio.create_task(hold())
    waiter = asyncio.create_task(hold())
    await asyncio.sleep(0.01)
    assert admission.waiting == 1
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert (admission.in_flight, admission.waiting) == (1, 0)

    gate.set()
    await holder
    assert admission.in_flight == 0
