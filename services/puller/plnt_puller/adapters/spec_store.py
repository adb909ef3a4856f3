"""Pulled spec bytes in the ``plnt-specs`` object store, named by their digest.

Content addressing makes a stored spec final: an object under the digest holds the same
bytes, so the puller asks ``contains`` and writes only what is missing. It does not read
specs back (runners do, with nats-py's object store) or delete.

Both calls speak nats-py's object-store layout directly (the metadata is its
``api.ObjectInfo``, tests read the objects back with its ``ObjectStore``): its ``put``
reads the object's info first, to purge an older version's chunks, and its ``get_info``
goes through the JSON API; a spec is only written after ``contains`` said it is absent,
and the stream allows direct gets, so each pull saves a round trip and a slower read on
its critical path.
"""

import base64
import hashlib
import json
from datetime import UTC, datetime

from nats.errors import Error as NatsError
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError
from nats.js.kv import MSG_ROLLUP_SUBJECT
from nats.js.object_store import (
    OBJ_CHUNKS_PRE_TEMPLATE,
    OBJ_DEFAULT_CHUNK_SIZE,
    OBJ_DIGEST_TEMPLATE,
    OBJ_META_PRE_TEMPLATE,
    OBJ_STREAM_TEMPLATE,
)
from nats.nuid import NUID

from plnt_common import subjects
from plnt_common.errors import BusUnavailable


class ObjectStoreSpecs:
    """Implements ``ports.SpecStore`` over the ``plnt-specs`` object store."""

    def __init__(
        self,
        *,
        js: JetStreamContext,
        bucket: str = subjects.SPECS_OBJECT_STORE,
        chunk_size: int = OBJ_DEFAULT_CHUNK_SIZE,
    ) -> None:
        self._js = js
        self._bucket = bucket
        self._stream = OBJ_STREAM_TEMPLATE.format(bucket=bucket)
        self._chunk_size = chunk_size
        self._nuid = NUID()

    async def contains(self, *, digest: str) -> bool:
        try:
            meta = await self._js.get_last_msg(
                self._stream, self._meta_subject(digest), direct=True
            )
        except NotFoundError:
            return False
        except (NatsError, TimeoutError) as exc:
            raise BusUnavailable(f"cannot look up spec {digest}: {exc!r}") from None
        return not json.loads(meta.data or b"{}").get("deleted", False)

    async def put(self, *, digest: str, data: bytes) -> None:
        nuid = self._nuid.next().decode()  # object ids as nats-py makes them
        chunks = [data[at : at + self._chunk_size] for at in range(0, len(data), self._chunk_size)]
        info = api.ObjectInfo(
            name=digest,
            bucket=self._bucket,
            nuid=nuid,
            size=len(data),
            chunks=len(chunks),
            mtime=datetime.now(UTC).isoformat(),
            digest=OBJ_DIGEST_TEMPLATE.format(
                digest=base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()
            ),
            options=api.ObjectMetaOptions(max_chunk_size=self._chunk_size),
        )
        chunk_subject = OBJ_CHUNKS_PRE_TEMPLATE.format(bucket=self._bucket, obj=nuid)
        try:
            # Chunks first, metadata last: a crash mid-put leaves no visible object,
            # so the redelivered pull writes it again.
            for chunk in chunks:
                await self._js.publish(chunk_subject, chunk)
            await self._js.publish(
                self._meta_subject(digest),
                json.dumps(info.as_dict()).encode(),
                headers={api.Header.ROLLUP: MSG_ROLLUP_SUBJECT},
            )
        except (NatsError, TimeoutError) as exc:
            raise BusUnavailable(f"cannot store spec {digest}: {exc!r}") from None

    def _meta_subject(self, name: str) -> str:
        encoded = base64.urlsafe_b64encode(name.encode()).decode()
        return OBJ_META_PRE_TEMPLATE.format(bucket=self._bucket, obj=encoded)
