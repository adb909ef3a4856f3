"""An object-store object written as one atomic batch: its chunks and its metadata.

nats-py's ``ObjectStore.put`` reads the object's info, then stores each chunk and the
metadata one publish at a time, each acknowledged (and, with ``sync_interval: always``,
fsynced) on its own. A spec is small and written once under its digest, so the puller
writes it as one atomic batch instead (nats-server 2.12+): one round trip, stored at the
commit, all or nothing, in the layout nats-py's object store reads (``api.ObjectInfo``
as the metadata, a rollup of the metadata subject).
"""

import base64
import hashlib
import json
import uuid
from datetime import UTC, datetime

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js import api
from nats.js.kv import MSG_ROLLUP_SUBJECT
from nats.js.object_store import (
    OBJ_CHUNKS_PRE_TEMPLATE,
    OBJ_DEFAULT_CHUNK_SIZE,
    OBJ_DIGEST_TEMPLATE,
    OBJ_META_PRE_TEMPLATE,
    OBJ_STREAM_TEMPLATE,
)

from plnt_common.bus.kv_batch import COMMIT_TIMEOUT_S, MAX_BATCH
from plnt_common.errors import BusUnavailable


def object_stream(bucket: str) -> str:
    """The stream behind an object store."""
    return OBJ_STREAM_TEMPLATE.format(bucket=bucket)


async def put_object(
    nc: Client, bucket: str, name: str, data: bytes, *, chunk_size: int = OBJ_DEFAULT_CHUNK_SIZE
) -> None:
    """Store ``data`` as object ``name`` in one atomic batch; raises ``BusUnavailable``.

    The caller knows no object ``name`` exists yet (an object it replaces would keep its
    old chunks: nats-py's put purges them, this does not).
    """
    nuid = nc._nuid.next().decode()  # nats-py's own object ids; no public accessor
    chunks = [data[at : at + chunk_size] for at in range(0, len(data), chunk_size)]
    if len(chunks) + 1 > MAX_BATCH:
        raise ValueError(f"object {name} needs {len(chunks)} chunks, more than one batch holds")
    info = api.ObjectInfo(
        name=name,
        bucket=bucket,
        nuid=nuid,
        size=len(data),
        chunks=len(chunks),
        mtime=datetime.now(UTC).isoformat(),
        digest=OBJ_DIGEST_TEMPLATE.format(
            digest=base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()
        ),
        options=api.ObjectMetaOptions(max_chunk_size=chunk_size),
    )
    batch_id = uuid.uuid4().hex
    chunk_subject = OBJ_CHUNKS_PRE_TEMPLATE.format(bucket=bucket, obj=nuid)
    meta_subject = OBJ_META_PRE_TEMPLATE.format(
        bucket=bucket, obj=base64.urlsafe_b64encode(name.encode()).decode()
    )
    try:
        for sequence, chunk in enumerate(chunks, start=1):
            headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(sequence)}
            await nc.publish(chunk_subject, chunk, headers=headers)
        commit = {
            "Nats-Batch-Id": batch_id,
            "Nats-Batch-Sequence": str(len(chunks) + 1),
            "Nats-Batch-Commit": "1",
            api.Header.ROLLUP: MSG_ROLLUP_SUBJECT,
        }
        reply = await nc.request(
            meta_subject,
            json.dumps(info.as_dict()).encode(),
            headers=commit,
            timeout=COMMIT_TIMEOUT_S,
        )
    except (NatsError, TimeoutError) as exc:
        raise BusUnavailable(f"writing object {name} to {bucket} failed: {exc!r}") from None
    ack = json.loads(reply.data or b"{}")
    if "error" in ack or ack.get("count") != len(chunks) + 1:
        raise BusUnavailable(f"object {name} was not stored in {bucket}: {ack}")
