"""Idempotent provisioning of the stream, KV buckets and object store every service uses.

Every process calls ``ensure_jetstream`` at start; creating what exists is a no-op, so
services can start in any order and scale out without a separate migration step.

Replicas (``PLNT_NATS_REPLICAS``): everything is created with the setting, and when it is
set, existing streams, buckets and the object store are brought to it (and the change
logged), so scaling NATS from one node to three needs only the new setting. ``None``
(the variable unset: a CLI, a tool) creates with one replica and changes nothing existing,
so it never shrinks what a cluster's services provisioned.
"""

import asyncio
import contextlib
from dataclasses import dataclass

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, BadRequestError, NotFoundError, ServiceUnavailableError

from plnt_common import subjects
from plnt_common.bus.kv_batch import bucket_stream
from plnt_common.errors import BusUnavailable
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


OBJECT_STORE_STREAM_TEMPLATE = "OBJ_{bucket}"
PROVISION_RETRY_S = 30.0
"""How long provisioning retries a cluster's transient answers before it gives up."""
REPLICA_ERRORS = {10074, 10023}
"""JetStream's 'replicas > 1 not supported in non-clustered mode' and 'insufficient
resources' (fewer nodes than replicas)."""


async def ensure_jetstream(js: JetStreamContext, *, replicas: int | None = None) -> None:
    """Create or update the stream, buckets and object store; safe to call concurrently.

    Retries what a cluster answers while it elects leaders or while another service
    creates the same stream (a timeout, no responders, a stream not found yet) for
    ``PROVISION_RETRY_S``. Raises ``BusUnavailable`` naming the setting when the servers
    cannot hold ``replicas`` (more than there are nodes, or a single server)."""
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + PROVISION_RETRY_S
    while True:
        try:
            await _provision(js, replicas)
            return
        except APIError as exc:
            if replicas not in (None, 1) and exc.err_code in REPLICA_ERRORS:
                raise BusUnavailable(
                    f"NATS cannot keep {replicas} replicas (PLNT_NATS_REPLICAS): {exc.description}"
                ) from None
            if not isinstance(exc, (NotFoundError, ServiceUnavailableError)):
                raise
            problem: Exception = exc
        except (NatsTimeout, NoRespondersError) as exc:
            problem = exc
        if loop.time() >= give_up_at:
            raise BusUnavailable(f"provisioning JetStream failed: {problem!r}") from None
        log.info("provision.retry", error=repr(problem))
        await asyncio.sleep(0.5)


async def _provision(js: JetStreamContext, replicas: int | None) -> None:
    await _ensure_stream(js, replicas)
    await _ensure_dead_letters(js, replicas)
    for bucket in BUCKETS:
        await _ensure_bucket(js, bucket, replicas)
    await _ensure_object_store(js, replicas)


async def _set_replicas(
    js: JetStreamContext, stream: str, replicas: int | None, *, read_directly: bool = False
) -> None:
    """Bring an existing stream to ``replicas`` (None: keep its count). A stream
    ``read_directly`` (a bucket's, the events stream) also serves direct gets only while it
    has one replica (see ``direct_reads``)."""
    config = (await js.stream_info(stream)).config
    before = config.num_replicas or 1
    after = replicas or before
    direct = direct_reads(after)
    if after == before and (not read_directly or bool(config.allow_direct) == direct):
        return
    config.num_replicas = after
    if read_directly:
        config.allow_direct = direct
    await js.update_stream(config)
    log.info(
        "provision.replicas_changed",
        stream=stream,
        before=before,
        after=after,
        direct_reads=config.allow_direct,
    )


def direct_reads(replicas: int) -> bool:
    """Whether a stream read by key or subject (a bucket's, the events stream) with
    ``replicas`` answers reads as direct gets.

    A direct get skips the JSON API round trip and its header parsing (about 25% cheaper
    reads, and every saga step reads the saga registry and the projection, some the
    step before theirs from the events stream), but any
    replica answers it: a follower that has not applied the latest write yet, or is
    catching up after a restart, answers with an older value or none, so a read right
    after a write could miss it (seen on a 3-node cluster: an installer found no desired
    record it had just written). Replicated buckets are read through their leader."""
    return replicas == 1


async def _ensure_stream(js: JetStreamContext, replicas: int | None) -> None:
    config = api.StreamConfig(
        name=subjects.STREAM,
        subjects=list(subjects.STREAM_SUBJECTS),
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.LIMITS,
        duplicate_window=DUPLICATE_WINDOW_S,
        max_msg_size=1024 * 1024,
        description="plnt saga events: the history every service follows.",
        num_replicas=replicas or 1,
        allow_direct=direct_reads(replicas or 1),
    )
    try:
        existing = await js.stream_info(subjects.STREAM)
    except NotFoundError:
        try:
            await js.add_stream(config)
            return
        except BadRequestError:  # a concurrent starter created it first
            existing = await js.stream_info(subjects.STREAM)
    # An update without a replica count would scale the stream down to one
    config.num_replicas = existing.config.num_replicas or 1
    config.allow_direct = existing.config.allow_direct
    await js.update_stream(config)
    await _set_replicas(js, subjects.STREAM, replicas, read_directly=True)


async def _ensure_dead_letters(js: JetStreamContext, replicas: int | None) -> None:
    """Keep the server's 'message terminated' advisories: ``plnt history``'s dead letters."""
    config = api.StreamConfig(
        name=subjects.DEAD_LETTER_STREAM,
        subjects=list(subjects.DEAD_LETTER_SUBJECTS),
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.LIMITS,
        max_age=DEAD_LETTER_MAX_AGE_S,
        description="Advisories of PLNT_EVENTS messages a consumer terminated.",
        num_replicas=replicas or 1,
    )
    try:
        await js.stream_info(subjects.DEAD_LETTER_STREAM)
    except NotFoundError:
        with contextlib.suppress(BadRequestError):  # a concurrent starter created it first
            await js.add_stream(config)
            return
    await _set_replicas(js, subjects.DEAD_LETTER_STREAM, replicas)


async def _ensure_bucket(js: JetStreamContext, bucket: BucketSpec, replicas: int | None) -> None:
    try:
        await js.key_value(bucket.name)
    except NotFoundError:  # BucketNotFoundError is one
        await _create_bucket(js, bucket, replicas)
    await _set_replicas(js, bucket_stream(bucket.name), replicas, read_directly=True)
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


async def _create_bucket(js: JetStreamContext, bucket: BucketSpec, replicas: int | None) -> None:
    try:
        await js.create_key_value(
            bucket=bucket.name,
            history=bucket.history,
            storage=api.StorageType.FILE,
            description=bucket.description,
            replicas=replicas or 1,
            direct=direct_reads(replicas or 1),
        )
    except BadRequestError:  # created concurrently
        await js.key_value(bucket.name)


async def _ensure_object_store(js: JetStreamContext, replicas: int | None) -> None:
    try:
        await js.object_store(subjects.SPECS_OBJECT_STORE)
    except NotFoundError:
        try:
            await js.create_object_store(
                subjects.SPECS_OBJECT_STORE,
                storage=api.StorageType.FILE,
                description="Workflow specs by digest.",
                replicas=replicas or 1,
            )
            return
        except BadRequestError:
            await js.object_store(subjects.SPECS_OBJECT_STORE)
    stream = OBJECT_STORE_STREAM_TEMPLATE.format(bucket=subjects.SPECS_OBJECT_STORE)
    await _set_replicas(js, stream, replicas)
