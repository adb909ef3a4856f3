"""Many KV writes at once: JetStream atomic batch publishing (nats-server 2.12+).

With ``sync_interval: always`` every stored message costs an fsync, so writing a
thousand keys one by one takes a thousand of them; an atomic batch is stored (and
acknowledged) once, at its commit. ``plnt replay`` writes the whole projection this way.
A bucket whose stream does not allow atomic batches (made by an older plnt, or a server
before 2.12 that dropped the flag) is written key by key instead.
"""

import asyncio
import json
import uuid

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from plnt_common.errors import BusUnavailable

MAX_BATCH = 1000
"""The server's default ``max_msgs`` per atomic batch."""
COMMIT_TIMEOUT_S = 10.0
WRITES_IN_FLIGHT = 64


def bucket_stream(bucket: str) -> str:
    return f"KV_{bucket}"


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
    prefix = f"$KV.{bucket}."  # where kv.put writes a key
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
    ack = json.loads(reply.data or b"{}")
    if "error" in ack or ack.get("count") != len(pairs):
        raise BusUnavailable(f"batch write to bucket {bucket} was not stored: {ack}")


async def _put_one_by_one(nc: Client, bucket: str, items: dict[str, bytes]) -> None:
    kv = await nc.jetstream().key_value(bucket)
    slots = asyncio.Semaphore(WRITES_IN_FLIGHT)  # independent keys: write them concurrently

    async def put(key: str, value: bytes) -> None:
        async with slots:
            await kv.put(key, value)

    await asyncio.gather(*(put(key, value) for key, value in items.items()))
