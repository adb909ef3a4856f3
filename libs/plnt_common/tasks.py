"""Small asyncio helpers the services share."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from plnt_common.logs import get_logger

log = get_logger(__name__)


CANCEL_AGAIN_S = 1.0
"""How long a cancelled task may take before it is cancelled again."""


async def cancelled(work: "asyncio.Future[Any]") -> None:
    """Cancel ``work`` and wait until it is done, cancelling it again every
    ``CANCEL_AGAIN_S``: one cancellation can be lost, since Python 3.11's
    ``asyncio.wait_for`` (which nats-py awaits on every request) swallows one that lands as
    its inner future completes, and a loop that never returns on its own then runs on.
    Raises what ``work`` raised other than its cancellation; if the caller itself is
    cancelled meanwhile, ``work`` is cancelled once more and the caller's cancellation
    goes on."""
    try:
        while not work.done():
            work.cancel()
            await asyncio.wait({work}, timeout=CANCEL_AGAIN_S)
    except asyncio.CancelledError:
        work.cancel()
        raise
    if not _ended_by_cancel(work):
        failure = work.exception()
        if failure is not None:
            raise failure


def _ended_by_cancel(work: "asyncio.Future[Any]") -> bool:
    """Cancelled, or (a gather's future, which keeps its children's cancellation as its
    exception) failed with a ``CancelledError``."""
    return work.cancelled() or isinstance(work.exception(), asyncio.CancelledError)


async def discard(work: "asyncio.Future[Any]") -> None:
    """Cancel work no longer wanted and wait for it; its outcome does not matter any more.

    Re-raises the cancellation only when the calling task itself is being cancelled.
    """
    try:
        await cancelled(work)
    except Exception as exc:
        log.debug("task.discarded", error=repr(exc))
        return
    task = asyncio.current_task()
    if _ended_by_cancel(work) and task is not None and task.cancelling():
        raise asyncio.CancelledError  # the caller itself is being cancelled, not just the work


@contextlib.asynccontextmanager
async def discarded_on_error(work: "asyncio.Future[Any]") -> AsyncIterator[None]:
    """Run the block while ``work`` goes on; if the block raises, ``work`` is discarded."""
    try:
        yield
    except BaseException:
        await discard(work)
        raise


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
        await cancelled(task)
