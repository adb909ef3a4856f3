"""A KV bucket's live keys at one moment, read in batches.

nats-py's listings (``KeyValue.keys()``, a watch read up to its end-of-initial-values
marker) can end before delivering what they list: the client asks for the consumer's
pending count after the server has sent everything, when the client has not counted any
of it yet (seen: an empty listing of a 30-key bucket, 2 times in 150). Here the pending
count comes with the consumer's creation, so exactly that many messages are read.
"""

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from plnt_common.bus.history import read_batches
from plnt_common.bus.kv_batch import bucket_stream, key_prefix


async def kv_snapshot(nc: Client, bucket: str, keys: str = ">") -> dict[str, tuple[int, bytes]]:
    """Every key matching ``keys`` (a subject filter) with its revision and value; deleted
    keys left out.

    Raises ``BusUnavailable`` when the server does not answer a batch.
    """
    listed = await kv_revisions(nc, bucket, keys)
    return {key: (revision, value) for key, (revision, value) in listed.items() if value}


async def kv_revisions(
    nc: Client, bucket: str, keys: str = ">"
) -> dict[str, tuple[int, bytes | None]]:
    """``kv_snapshot`` with deleted keys too (value None): the revision each key's next
    compare-and-set write expects."""
    prefix = key_prefix(bucket)
    config = api.ConsumerConfig(
        # the server's default for a consumer created without an ack policy is none too
        ack_policy=api.AckPolicy.NONE,  # pragma: no mutate
        deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
        filter_subject=prefix + keys,
        # Clean-up only: the listing deletes its consumer; this bounds how long one whose
        # client vanished lingers, and no listing pauses 5 s (the server's default).
        inactive_threshold=30.0,  # pragma: no mutate
        mem_storage=True,  # pragma: no mutate  (cost only: a consumer of one listing)
    )
    values: dict[str, tuple[int, bytes | None]] = {}
    async for batch in read_batches(
        nc, stream=bucket_stream(bucket), config=config, keep=_key_value
    ):
        # the last message of each key only: a deleted key's is its marker, alone
        for subject, revision, value in batch:
            values[subject.removeprefix(prefix)] = (revision, value)
    return values


def _key_value(msg: Msg) -> tuple[str, int, bytes | None]:
    """(subject, revision, value), value None for a delete or purge marker (which carries
    no data; an empty value is read as deleted too)."""
    return msg.subject, msg.metadata.sequence.stream, msg.data or None


class InitialValues:
    """Tells when a KV watch has delivered a bucket's initial values.

    nats-py's end-of-initial-values marker (a None update) can come before the values.
    Built from a ``kv_snapshot`` taken after the watch began, this waits for the marker
    and for every listed key at its listed revision (or later: a change after the
    listing, a deletion included).
    """

    def __init__(self, listed: dict[str, tuple[int, bytes]]) -> None:
        # the marker (key None) is awaited like one more key, at any revision
        self._awaited: dict[str | None, int] = {None: 0}
        self._awaited.update((key, revision) for key, (revision, _) in listed.items())

    # only the marker comes without a revision, and any revision counts for it
    def saw(self, key: str | None, revision: int = 0) -> bool:  # pragma: no mutate
        """Record one update (``key`` None: nats-py's marker); True once all are in."""
        if key in self._awaited and revision >= self._awaited[key]:
            del self._awaited[key]
        return not self._awaited
