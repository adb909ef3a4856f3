"""Small asyncio helpers the services share."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
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
