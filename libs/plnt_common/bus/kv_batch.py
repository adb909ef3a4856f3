"""Many KV writes at once: JetStream atomic batch publishing (nats-server 2.12+).

Writing a thousand keys one by one is a thousand stored and acknowledged messages (and,
on a server with ``sync_interval: always``, a thousand fsyncs); an atomic batch is stored
and acknowledged once, at its commit. ``plnt replay`` writes the whole projection this
way. A bucket whose stream does not allow atomic batches (made by an older plnt, or a
server before 2.12 that dropped the flag) is written key by key instead.

Given the revisions the caller read (``expected``), every write and purge is a
compare-and-set (``Nats-Expected-Last-Subject-Sequence``; 0 for a key never written): a
key another writer changed meanwhile fails the call with ``Conflict``, a batch as a whole.
"""

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.client import KV_PRE_TEMPLATE, KV_STREAM_TEMPLATE
from nats.js.errors import APIError, KeyWrongLastSequenceError, NotFoundError

from plnt_common.errors import BusUnavailable, Conflict

MAX_BATCH = 1000
"""The server's default ``max_msgs`` per atomic batch."""
COMMIT_TIMEOUT_S = 10.0
WRITES_IN_FLIGHT = 64
EXPECTED = "Nats-Expected-Last-Subject-Sequence"
WRONG_LAST_SEQUENCE = (10071, 10164)
"""JetStream's error codes for a compare-and-set that lost."""


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
    nc: Client,
    bucket: str,
    items: dict[str, bytes],
    *,
    batch_size: int = MAX_BATCH,
    expected: Mapping[str, int] | None = None,
) -> None:
    """Write every key's value; raises ``BusUnavailable`` when a write is not stored, and
    ``Conflict`` when a key is no longer at its ``expected`` revision.

    Each batch of up to ``batch_size`` keys is all-or-nothing; a failed call may have
    stored earlier batches, so callers write values that are right whatever else landed.
    """
    if not items:
        return
    if not await allows_atomic(nc, bucket):
        await _put_one_by_one(nc, bucket, items, expected)
        return
    pairs = list(items.items())
    for start in range(0, len(pairs), batch_size):
        await _put_batch(nc, bucket, pairs[start : start + batch_size], expected)


def _expecting(expected: Mapping[str, int] | None, key: str) -> dict[str, str]:
    return {} if expected is None else {EXPECTED: str(expected.get(key, 0))}


async def _put_batch(
    nc: Client,
    bucket: str,
    pairs: list[tuple[str, bytes]],
    expected: Mapping[str, int] | None,
) -> None:
    batch_id = uuid.uuid4().hex
    prefix = key_prefix(bucket)
    try:
        for sequence, (key, value) in enumerate(pairs[:-1], start=1):
            headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(sequence)}
            headers.update(_expecting(expected, key))
            await nc.publish(prefix + key, value, headers=headers)
        key, value = pairs[-1]
        commit = {
            "Nats-Batch-Id": batch_id,
            "Nats-Batch-Sequence": str(len(pairs)),
            "Nats-Batch-Commit": "1",
            **_expecting(expected, key),
        }
        reply = await nc.request(prefix + key, value, headers=commit, timeout=COMMIT_TIMEOUT_S)
    except (NatsError, TimeoutError) as exc:
        raise BusUnavailable(f"batch write to bucket {bucket} failed: {exc!r}") from None
    # the server answers a commit with JSON; an empty reply reads as not stored
    ack = json.loads(reply.data or b"{}")  # pragma: no mutate
    if ack.get("error", {}).get("err_code") in WRONG_LAST_SEQUENCE:
        raise Conflict(f"a key of bucket {bucket} changed meanwhile: {ack['error']}")
    if ack.get("count") != len(pairs):  # a refused batch's answer has an error, no count
        raise BusUnavailable(f"batch write to bucket {bucket} was not stored: {ack}")


async def _put_one_by_one(
    nc: Client, bucket: str, items: dict[str, bytes], expected: Mapping[str, int] | None
) -> None:
    kv = await nc.jetstream().key_value(bucket)

    async def put(key: str) -> None:
        if expected is None:
            await kv.put(key, items[key])
            return
        try:
            await kv.update(key, items[key], last=expected.get(key, 0))
        except KeyWrongLastSequenceError:
            raise Conflict(f"key {key} of bucket {bucket} changed meanwhile") from None

    await each_in_flight(put, items)


async def purge_all(
    nc: Client, bucket: str, keys: Iterable[str], *, expected: Mapping[str, int] | None = None
) -> None:
    """Purge every key, a bounded number at a time; with ``expected``, only a key still at
    its revision (else ``Conflict``)."""
    kv = await nc.jetstream().key_value(bucket)
    if expected is None:
        await each_in_flight(kv.purge, keys)
        return
    js = nc.jetstream()

    async def purge(key: str) -> None:
        # nats-py's purge takes no revision: the same marker, with the expectation
        headers = {"KV-Operation": "PURGE", "Nats-Rollup": "sub", EXPECTED: str(expected[key])}
        try:
            await js.publish(key_prefix(bucket) + key, b"", headers=headers)
        except APIError as exc:
            if exc.err_code in WRONG_LAST_SEQUENCE:
                raise Conflict(f"key {key} of bucket {bucket} changed meanwhile") from None
            raise

    await each_in_flight(purge, keys)


async def each_in_flight(call: Callable[[str], Awaitable[object]], keys: Iterable[str]) -> None:
    """``call(key)`` for every key, at most ``WRITES_IN_FLIGHT`` at once (keys are
    independent, so their writes need not wait for each other)."""
    slots = asyncio.Semaphore(WRITES_IN_FLIGHT)

    async def one(key: str) -> None:
        async with slots:
            await call(key)

    await asyncio.gather(*(one(key) for key in keys))
