"""Small asyncio helpers the services share."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from plnt_common.logs import get_logger

log = get_logger(__name__)


async def discard(work: "asyncio.Future[Any]") -> None:
    """Cancel work no longer wanted and wait for it; its outcome does not matter any more.

    Re-raises the cancellation only when the calling task itself is being cancelled.
    """
    work.cancel()
    try:
        await work
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the caller itself is being cancelled, not just the work
    except Exception as exc:
        log.debug("task.discarded", error=repr(exc))


@contextlib.asynccontextmanager
async def discarded_on_error(work: "asyncio.Future[Any]") -> AsyncIterator[None]:
    """Run the block while ``work`` goes on; if the block raises, ``work`` is discarded."""
    try:
        yield
    except BaseException:
        await discard(work)
        raise


CANCEL_AGAIN_S = 1.0
"""How long a cancelled task may take before it is cancelled again."""


async def until_stopped(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> None:
    """Run ``work`` until it returns or ``stop`` is set, then cancel it until it is done.

    Cancelled again every ``CANCEL_AGAIN_S`` because one cancellation can be lost: Python
    3.11's ``asyncio.wait_for`` (which nats-py awaits on every request) swallows a
    cancellation that lands as its inner future completes, and a loop that never returns
    on its own would then run on. Raises what ``work`` raised.
    """
    task = asyncio.create_task(work)
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=CANCEL_AGAIN_S)
    if not task.cancelled():
        task.result()
