"""Idempotent provisioning of the stream, KV buckets and object store every service uses.

Every process calls ``ensure_jetstream`` at start; creating what exists is a no-op, so
services can start in any order and scale out without a separate migration step.
"""

import contextlib
from dataclasses import dataclass

from nats.js import JetStreamContext, api
from nats.js.errors import APIError, BadRequestError, NotFoundError

from plnt_common import subjects
from plnt_common.bus.kv_batch import bucket_stream
from plnt_common.logs import get_logger

log = get_logger(__name__)

DUPLICATE_WINDOW_S = 2 * 60 * 60
"""How long ``Nats-Msg-Id`` deduplicates: longer than any saga step's deadline."""
DEAD_LETTER_MAX_AGE_S = 30 * 24 * 60 * 60


@dataclass(frozen=True)
class BucketSpec:
    name: str
    history: int
    description: str
    atomic_batches: bool = False
    """Accept atomic batch writes (``kv_batch.put_all``); also turned on for an existing
    bucket, since it changes nothing for single writes."""


BUCKETS = (
    BucketSpec(
        subjects.RUNS_BUCKET, 5, "Projection of every WorkflowRun's saga.", atomic_batches=True
    ),
    BucketSpec(subjects.ROUTES_BUCKET, 5, "Router table: stable, canary, weight per workflow."),
    BucketSpec(subjects.RESOURCES_BUCKET, 5, "Resource store of the embedded mode."),
    BucketSpec(subjects.RELEASES_BUCKET, 1, "Local backend: desired and observed releases."),
    BucketSpec(subjects.SAGAS_BUCKET, 1, "One terminal claim per saga id."),
)


async def ensure_jetstream(js: JetStreamContext) -> None:
    """Create or update the stream, buckets and object store; safe to call concurrently."""
    await _ensure_stream(js)
    await _ensure_dead_letters(js)
    for bucket in BUCKETS:
        await _ensure_bucket(js, bucket)
    await _ensure_object_store(js)


async def _ensure_stream(js: JetStreamContext) -> None:
    config = api.StreamConfig(
        name=subjects.STREAM,
        subjects=list(subjects.STREAM_SUBJECTS),
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.LIMITS,
        duplicate_window=DUPLICATE_WINDOW_S,
        max_msg_size=1024 * 1024,
        description="plnt saga events: the history every service follows.",
    )
    try:
        await js.stream_info(subjects.STREAM)
    except NotFoundError:
        try:
            await js.add_stream(config)
            return
        except BadRequestError:  # a concurrent starter created it first
            pass
    await js.update_stream(config)


async def _ensure_dead_letters(js: JetStreamContext) -> None:
    """Keep the server's 'message terminated' advisories: ``plnt history``'s dead letters."""
    config = api.StreamConfig(
        name=subjects.DEAD_LETTER_STREAM,
        subjects=list(subjects.DEAD_LETTER_SUBJECTS),
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.LIMITS,
        max_age=DEAD_LETTER_MAX_AGE_S,
        description="Advisories of PLNT_EVENTS messages a consumer terminated.",
    )
    try:
        await js.stream_info(subjects.DEAD_LETTER_STREAM)
    except NotFoundError:
        with contextlib.suppress(BadRequestError):  # a concurrent starter created it first
            await js.add_stream(config)


async def _ensure_bucket(js: JetStreamContext, bucket: BucketSpec) -> None:
    try:
        await js.key_value(bucket.name)
    except NotFoundError:  # BucketNotFoundError is one
        await _create_bucket(js, bucket)
    if bucket.atomic_batches:
        await _allow_atomic_batches(js, bucket_stream(bucket.name))


async def _allow_atomic_batches(js: JetStreamContext, stream: str) -> None:
    """Turn atomic batches on; a server before 2.12 refuses or ignores the flag, and the
    bucket is then written key by key (``kv_batch.put_all``)."""
    config = (await js.stream_info(stream)).config
    if config.allow_atomic:
        return
    config.allow_atomic = True
    try:
        await js.update_stream(config)
    except APIError as exc:
        log.warning("provision.atomic_batches_unavailable", stream=stream, error=str(exc))


async def _create_bucket(js: JetStreamContext, bucket: BucketSpec) -> None:
    try:
        await js.create_key_value(
            bucket=bucket.name,
            history=bucket.history,
            storage=api.StorageType.FILE,
            description=bucket.description,
            # direct gets skip the JSON API round trip and its header parsing: ~25% cheaper
            # reads, and every saga step reads the saga registry and the projection
            direct=True,
        )
    except BadRequestError:  # created concurrently
        await js.key_value(bucket.name)


async def _ensure_object_store(js: JetStreamContext) -> None:
    try:
        await js.object_store(subjects.SPECS_OBJECT_STORE)
    except NotFoundError:
        try:
            await js.create_object_store(
                subjects.SPECS_OBJECT_STORE,
                storage=api.StorageType.FILE,
                description="Workflow specs by digest.",
            )
        except BadRequestError:
            await js.object_store(subjects.SPECS_OBJECT_STORE)
