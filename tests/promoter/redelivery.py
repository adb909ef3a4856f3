"""Drives a deferring handler as the consumer does: each deferral is a new delivery after
its delay, until a delivery answers without deferring."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import cast

from nats.aio.msg import Msg

from plnt_common.bus.consumer import Delivery

MAX_CHECKS = 1000


async def until_answered(check: Callable[[Delivery], Awaitable[None]]) -> list[float]:
    """Run ``check`` on fresh deliveries until one does not defer; the deferrals asked."""
    deferrals: list[float] = []
    for _ in range(MAX_CHECKS):
        delivery = Delivery(msg=cast(Msg, None), attempt=1)
        await check(delivery)
        if delivery.deferred_s is None:
            return deferrals
        deferrals.append(delivery.deferred_s)
        await asyncio.sleep(delivery.deferred_s)
    raise AssertionError(f"still deferring after {MAX_CHECKS} checks: {deferrals[-5:]}")
