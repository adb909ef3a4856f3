"""Many KV writes at once: JetStream atomic batch publishing (nats-server 2.12+).

Writing a thousand keys one by one is a thousand stored and acknowledged messages (and,
on a server with ``sync_interval: always``, a thousand fsyncs); an atomic batch is stored
and acknowledged once, at its commit. ``plnt replay`` writes the whole projection this
way. A bucket whose stream does not allow atomic batches (made by an older plnt, or a
server before 2.12 that dropped the flag) is written key by key instead.
"""

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Iterable

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.client import KV_PRE_TEMPLATE, KV_STREAM_TEMPLATE
from nats.js.errors import NotFoundError

from plnt_common.errors import BusUnavailable

MAX_BATCH = 1000
"""The server's default ``max_msgs`` per atomic batch."""
COMMIT_TIMEOUT_S = 10.0
WRITES_IN_FLIGHT = 64


def bucket_stream(bucket: str) -> str:
    """The stream behind a KV bucket."""
    return KV_STREAM_TEMPLATE.format(bucket=bucket)


def key_prefix(bucket: str) -> str:
    """The subject prefix a KV bucket's keys are written under."""
    return KV_PRE_TEMPLATE.format(bucket=bucket)


async def allows_atomic(nc: Client, bucket: str) -> bool:
    """Whether the bucket's stream accepts atomic batches."""
    try:
        info = await nc.jetstream().stream_info(bucket_stream(bucket))
    except NotFoundError:
        return False
    return bool(info.config.allow_atomic)


async def put_all(
    nc: Client, bucket: str, items: dict[str, bytes], *, batch_size: int = MAX_BATCH
) -> None:
    """Write every key's value; raises ``BusUnavailable`` when a write is not stored.

    Each batch of up to ``batch_size`` keys is all-or-nothing; a failed call may have
    stored earlier batches, so callers write values that are right whatever else landed.
    """
    if not items:
        return
    if not await allows_atomic(nc, bucket):
        await _put_one_by_one(nc, bucket, items)
        return
    pairs = list(items.items())
    for start in range(0, len(pairs), batch_size):
        await _put_batch(nc, bucket, pairs[start : start + batch_size])


async def _put_batch(nc: Client, bucket: str, pairs: list[tuple[str, bytes]]) -> None:
    batch_id = uuid.uuid4().hex
    prefix = key_prefix(bucket)
    try:
        for sequence, (key, value) in enumerate(pairs[:-1], start=1):
            headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(sequence)}
            await nc.publish(prefix + key, value, headers=headers)
        key, value = pairs[-1]
        commit = {
            "Nats-Batch-Id": batch_id,
            "Nats-Batch-Sequence": str(len(pairs)),
            "Nats-Batch-Commit": "1",
        }
        reply = await nc.request(prefix + key, value, headers=commit, timeout=COMMIT_TIMEOUT_S)
    except (NatsError, TimeoutError) as exc:
        raise BusUnavailable(f"batch write to bucket {bucket} failed: {exc!r}") from None
    # the server answers a commit with JSON; an empty reply reads as not stored
    ack = json.loads(reply.data or b"{}")  # pragma: no mutate
    if ack.get("count") != len(pairs):  # a refused batch's answer has an error, no count
        raise BusUnavailable(f"batch write to bucket {bucket} was not stored: {ack}")


async def _put_one_by_one(nc: Client, bucket: str, items: dict[str, bytes]) -> None:
    kv = await nc.jetstream().key_value(bucket)
    await each_in_flight(lambda key: kv.put(key, items[key]), items)


async def purge_all(nc: Client, bucket: str, keys: Iterable[str]) -> None:
    """Purge every key, a bounded number at a time."""
    kv = await nc.jetstream().key_value(bucket)
    await each_in_flight(kv.purge, keys)


async def each_in_flight(call: Callable[[str], Awaitable[object]], keys: Iterable[str]) -> None:
    """``call(key)`` for every key, at most ``WRITES_IN_FLIGHT`` at once (keys are
    independent, so their writes need not wait for each other)."""
    slots = asyncio.Semaphore(WRITES_IN_FLIGHT)

    async def one(key: str) -> None:
        async with slots:
            await call(key)

    await asyncio.gather(*(one(key) for key in keys))
