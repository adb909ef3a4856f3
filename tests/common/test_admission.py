"""The in-flight limiter: slots, FIFO hand-over, bounded queue, cancellation while queued."""

import asyncio

import pytest

from plnt_common.admission import InFlightLimiter, Saturated


async def test_limiter_queues_in_order_and_refuses_beyond_the_queue() -> None:
    depths: list[int] = []
    limiter = InFlightLimiter(max_in_flight=1, max_queue=2, on_queue_change=depths.append)
    await limiter.acquire()
    order: list[str] = []

    async def wait(name: str) -> None:
        await limiter.acquire()
        order.append(name)

    first = asyncio.create_task(wait("first"))
    second = asyncio.create_task(wait("second"))
    await asyncio.sleep(0)
    assert limiter.waiting == 2
    with pytest.raises(Saturated):
        await limiter.acquire()

    limiter.release()
    await first
    assert order == ["first"]
    assert limiter.in_flight == 1
    limiter.release()
    await second
    limiter.release()
    assert order == ["first", "second"]
    assert limiter.in_flight == 0
    assert limiter.waiting == 0
    assert depths[-1] == 0
    assert max(depths) == 2


async def test_a_cancelled_waiter_leaves_the_queue_and_loses_no_slot() -> None:
    limiter = InFlightLimiter(max_in_flight=1, max_queue=5)
    await limiter.acquire()
    waiter = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    # Release before the cancelled task runs its handler: the slot must not go to it.
    limiter.release()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert limiter.waiting == 0
    assert limiter.in_flight == 0
    await asyncio.wait_for(limiter.acquire(), timeout=1)
    assert limiter.in_flight == 1
