"""``tasks.cancelled``: a task that lost its cancellation (Python 3.11's ``wait_for`` inside
nats-py swallows one that lands as its inner future completes) is still ended."""

import asyncio

import pytest

from plnt_common.tasks import cancelled, discard

WITHIN_S = 5.0


async def loses_the_first_cancellation(lost: list[int]) -> None:
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            lost.append(1)
            if len(lost) > 1:
                raise


async def test_a_task_that_lost_its_first_cancellation_is_cancelled_again_until_done() -> None:
    lost: list[int] = []
    task = asyncio.create_task(loses_the_first_cancellation(lost))
    await asyncio.sleep(0)

    await asyncio.wait_for(cancelled(task), timeout=WITHIN_S)

    assert task.cancelled() and len(lost) == 2


async def test_what_the_task_raised_is_raised() -> None:
    async def fails() -> None:
        raise RuntimeError("broke")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="broke"):
        await cancelled(task)


async def test_discard_swallows_the_work_s_failure_and_ends_it() -> None:
    lost: list[int] = []
    task = asyncio.create_task(loses_the_first_cancellation(lost))
    await asyncio.sleep(0)

    await asyncio.wait_for(discard(task), timeout=WITHIN_S)

    assert task.cancelled()


async def test_a_discarded_gather_ends_quietly() -> None:
    """A gather's future keeps its children's cancellation as its exception, not as its
    own cancelled state: that is still a cancellation, not a failure to raise."""
    gathered = asyncio.gather(asyncio.sleep(3600), asyncio.sleep(3600))
    await asyncio.sleep(0)

    await asyncio.wait_for(discard(gathered), timeout=WITHIN_S)
    await asyncio.wait_for(cancelled(gathered), timeout=WITHIN_S)

    assert gathered.done()
