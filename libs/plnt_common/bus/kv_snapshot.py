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
from nats.js.kv import KV_DEL, KV_OP, KV_PURGE

from plnt_common.bus.history import read_batches
from plnt_common.bus.kv_batch import bucket_stream, key_prefix


async def kv_snapshot(nc: Client, bucket: str, keys: str = ">") -> dict[str, tuple[int, bytes]]:
    """Every key matching ``keys`` (a subject filter) with its revision and value; deleted
    keys left out.

    Raises ``BusUnavailable`` when the server does not answer a batch.
    """
    prefix = key_prefix(bucket)
    config = api.ConsumerConfig(
        ack_policy=api.AckPolicy.NONE,
        deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
        filter_subject=prefix + keys,
        inactive_threshold=30.0,
        mem_storage=True,
    )
    values: dict[str, tuple[int, bytes]] = {}
    async for batch in read_batches(
        nc, stream=bucket_stream(bucket), config=config, keep=_key_value
    ):
        for subject, revision, value in batch:
            key = subject.removeprefix(prefix)
            if value is None:
                values.pop(key, None)
            else:
                values[key] = (revision, value)
    return values


def _key_value(msg: Msg) -> tuple[str, int, bytes | None]:
    """(subject, revision, value), value None for a delete or purge marker."""
    operation = (msg.headers or {}).get(KV_OP)
    value = None if operation in (KV_DEL, KV_PURGE) or not msg.data else msg.data
    return msg.subject, msg.metadata.sequence.stream, value


class InitialValues:
    """Tells when a KV watch has delivered a bucket's initial values.

    nats-py's end-of-initial-values marker (a None update) can come before the values.
    Built from a ``kv_snapshot`` taken after the watch began, this waits for the marker
    and for every listed key at its listed revision (or later: a change after the
    listing, a deletion included).
    """

    def __init__(self, listed: dict[str, tuple[int, bytes]]) -> None:
        self._awaited = {key: revision for key, (revision, _) in listed.items()}
        self._marked = False

    def saw(self, key: str | None, revision: int = 0) -> bool:
        """Record one update (``key`` None: nats-py's marker); True once all are in."""
        if key is None:
            self._marked = True
        elif revision >= self._awaited.get(key, 0):
            self._awaited.pop(key, None)
        return self._marked and not self._awaited
