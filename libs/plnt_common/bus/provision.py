"""Idempotent provisioning of the stream, KV buckets and object store every service uses.

Every process calls ``ensure_jetstream`` at start; creating what exists is a no-op, so
services can start in any order and scale out without a separate migration step.

Replicas (``PLNT_NATS_REPLICAS``): everything is created with the setting, and when it is
set, existing streams, buckets and the object store are brought to it (and the change
logged), so scaling NATS from one node to three needs only the new setting. ``None``
(the variable unset: a CLI, a tool) creates with one replica and changes nothing existing,
so it never shrinks what a cluster's services provisioned.

Limits (``PLNT_EVENTS_MAX_AGE``, ``PLNT_EVENTS_MAX_BYTES``, ``PLNT_BUCKETS_MAX_BYTES``,
``PLNT_SHADOW_MAX_BYTES``, ``PLNT_SAGAS_MAX_AGE``): an existing configuration is merged,
never reset. A limit set in the environment is applied; an unset one gives its default
only to a stream without that limit, so a limit an operator set on the server stays.
Subjects are joined, never narrowed.

Versions: every stream and durable consumer plnt writes carries the writer's plnt version
in its ``metadata`` (``WRITER_KEY``). A configuration is rewritten only when it differs
from what this version wants, and only by a version at least as new as the one that wrote
it: in a rolling upgrade an old replica starting after a new one leaves the new
configuration alone (``provision.config_kept``).
"""

import asyncio
import contextlib
import dataclasses
import importlib.metadata
from collections.abc import Mapping
from dataclasses import dataclass

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, BadRequestError, NotFoundError, ServiceUnavailableError
from packaging.version import InvalidVersion, Version

from plnt_common import subjects
from plnt_common.bus.kv_batch import bucket_stream
from plnt_common.errors import BusUnavailable
from plnt_common.logs import get_logger
from plnt_common.settings import BusSettings, Limit

log = get_logger(__name__)

WRITER_KEY = "plnt.version"
"""The ``metadata`` key of a stream or consumer holding the plnt version that wrote it."""
SERVER_METADATA_PREFIX = "_nats."
"""Keys the server adds to every ``metadata`` itself (its version, API level)."""


def plnt_version() -> str:
    """This installation's plnt version: what it writes under ``WRITER_KEY``."""
    try:
        return importlib.metadata.version("plnt")
    except importlib.metadata.PackageNotFoundError:  # a source tree run without install
        return "0"


def _parsed(version: str | None) -> Version | None:
    try:
        return Version(version) if version else None
    except InvalidVersion:
        return None


def newer_writer(metadata: Mapping[str, str] | None, version: str) -> str | None:
    """The version that wrote ``metadata`` when it is newer than ``version``, else None
    (no writer recorded, an unreadable one, or one no newer: ``version`` may rewrite)."""
    written = (metadata or {}).get(WRITER_KEY)
    stored, own = _parsed(written), _parsed(version)
    if stored is None or own is None or own >= stored:
        return None
    return written


def own_metadata(metadata: Mapping[str, str] | None, version: str) -> dict[str, str]:
    """``metadata`` without the server's own keys, marked as written by ``version``."""
    kept = {k: v for k, v in (metadata or {}).items() if not k.startswith(SERVER_METADATA_PREFIX)}
    return {**kept, WRITER_KEY: version}


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
    BucketSpec(subjects.CAPACITY_BUCKET, 1, "Free GPUs per PlntBackend and class; reservations."),
)


OBJECT_STORE_STREAM_TEMPLATE = "OBJ_{bucket}"
PROVISION_RETRY_S = 30.0
"""How long provisioning retries a cluster's transient answers before it gives up."""
REPLICA_ERRORS = {10074, 10023}
"""JetStream's 'replicas > 1 not supported in non-clustered mode' and 'insufficient
resources' (fewer nodes than replicas)."""


async def ensure_jetstream(
    js: JetStreamContext,
    *,
    replicas: int | None = None,
    limits: BusSettings | None = None,
    version: str | None = None,
) -> None:
    """Create or update the stream, buckets and object store; safe to call concurrently.

    ``limits`` default to no explicit setting (each limit's default for what is created or
    has none), ``version`` to ``plnt_version()``.

    Retries what a cluster answers while it elects leaders or while another service
    creates the same stream (a timeout, no responders, a stream not found yet) for
    ``PROVISION_RETRY_S``. Raises ``BusUnavailable`` naming the setting when the servers
    cannot hold ``replicas`` (more than there are nodes, or a single server)."""
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + PROVISION_RETRY_S
    while True:
        try:
            await _provision(js, replicas, limits or BusSettings(), version or plnt_version())
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


async def _provision(
    js: JetStreamContext, replicas: int | None, limits: BusSettings, version: str
) -> None:
    await _ensure_stream(js, replicas, limits, version)
    await _ensure_dead_letters(js, replicas)
    try:
        await _ensure_shadow_stream(js, replicas, limits, version)
    except APIError as exc:
        if exc.err_code != INSUFFICIENT_STORAGE:
            raise
        # Optional to the saga: a server too small for its byte limit must not stop plnt.
        log.warning(
            "provision.shadow_stream_unavailable",
            stream=subjects.SHADOW_STREAM,
            max_bytes=int(limits.shadow_max_bytes.value),
            error=exc.description,
            hint="set PLNT_SHADOW_MAX_BYTES below the server's free JetStream storage",
        )
    for bucket in BUCKETS:
        await _ensure_bucket(js, bucket, replicas, limits, version)
    await _ensure_object_store(js, replicas, limits, version)


async def _created(js: JetStreamContext, config: api.StreamConfig) -> bool:
    """Create the stream unless it exists; True when this call created it (False also when a
    concurrent starter did a moment ago: the caller merges its configuration instead)."""
    try:
        await js.stream_info(config.name or "")
    except NotFoundError:
        try:
            await js.add_stream(config)
            return True
        except BadRequestError:  # a concurrent starter created it first
            pass
    return False


def _unlimited(value: float | None) -> bool:
    """NATS spells 'no limit' 0 for an age and -1 for a size."""
    return value is None or value <= 0


def limited(existing: float | None, limit: Limit) -> float | None:
    """The value one limit takes on an existing stream (0 for none): a setting given in
    the environment wins; else the existing limit stays, and only a stream without one
    gets the default. None when there is nothing to say (no limit either way)."""
    if limit.explicit:
        return limit.value
    if not _unlimited(existing):
        return existing
    return limit.value if limit.value > 0 else None


def merged_config(
    existing: api.StreamConfig,
    *,
    version: str,
    stream_subjects: list[str] | None = None,
    max_age_s: Limit | None = None,
    max_bytes: Limit | None = None,
    at_least: Mapping[str, int] | None = None,
    description: str | None = None,
) -> api.StreamConfig | None:
    """``existing`` with this version's wishes merged in, or None when it needs no rewrite
    (it already says the same and names its writer, or a newer version wrote it).
    Subjects are joined, the ``at_least`` fields (duplicate window, message size) only
    grow, limits follow ``limited``; every other field (replicas, placement, what an
    operator set) is kept."""
    if newer_writer(existing.metadata, version) is not None:
        return None
    changes: dict[str, object] = {}
    if stream_subjects is not None:
        joined = list(existing.subjects or [])
        joined += [subject for subject in stream_subjects if subject not in joined]
        changes["subjects"] = joined
    for field, value in (at_least or {}).items():
        current = getattr(existing, field)
        changes[field] = value if current is None or 0 <= current < value else current
    if max_age_s is not None:
        changes["max_age"] = limited(existing.max_age, max_age_s) or 0
    if max_bytes is not None:
        changes["max_bytes"] = int(limited(existing.max_bytes, max_bytes) or -1)
    if description is not None:
        changes["description"] = description
    unmarked = WRITER_KEY not in (existing.metadata or {})  # created without (a bucket)
    if not unmarked and all(_same(getattr(existing, f), v) for f, v in changes.items()):
        return None
    changes["metadata"] = own_metadata(existing.metadata, version)
    return dataclasses.replace(existing, **changes)  # type: ignore[arg-type]


def _same(before: object, after: object) -> bool:
    """Whether two values of a field say the same; an absent or non-positive number is
    NATS's 'no limit' (0 for an age, -1 for a size), so those compare equal."""
    if isinstance(after, (int, float)):
        return _number(before) == _number(after)
    return before == after


def _number(value: object) -> float:
    if isinstance(value, (int, float)) and value > 0:
        return float(value)
    return -1.0


async def _merge(
    js: JetStreamContext,
    stream: str,
    version: str,
    *,
    stream_subjects: list[str] | None = None,
    max_age_s: Limit | None = None,
    max_bytes: Limit | None = None,
    at_least: Mapping[str, int] | None = None,
    description: str | None = None,
) -> None:
    """Rewrite ``stream``'s configuration with these wishes merged (``merged_config``) when
    it differs and no newer version wrote it; log either."""
    existing = (await js.stream_info(stream)).config
    merged = merged_config(
        existing,
        version=version,
        stream_subjects=stream_subjects,
        max_age_s=max_age_s,
        max_bytes=max_bytes,
        at_least=at_least,
        description=description,
    )
    if merged is None:
        if (writer := newer_writer(existing.metadata, version)) is not None:
            log.info("provision.config_kept", stream=stream, written_by=writer, own=version)
        return
    await js.update_stream(merged)
    log.info(
        "provision.config_updated",
        stream=stream,
        max_age_s=merged.max_age,
        max_bytes=merged.max_bytes,
        subjects=merged.subjects,
        version=version,
    )


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


EVENTS_DESCRIPTION = "plnt saga events: the history every service follows."
MAX_EVENT_BYTES = 1024 * 1024


async def _ensure_stream(
    js: JetStreamContext, replicas: int | None, limits: BusSettings, version: str
) -> None:
    """``PLNT_EVENTS``: the oldest events go when a limit is reached (discard old), so a
    full stream never refuses a saga's publish."""
    config = api.StreamConfig(
        name=subjects.STREAM,
        subjects=list(subjects.STREAM_SUBJECTS),
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.LIMITS,
        discard=api.DiscardPolicy.OLD,
        duplicate_window=DUPLICATE_WINDOW_S,
        max_msg_size=MAX_EVENT_BYTES,
        max_age=limits.events_max_age_s.value,
        max_bytes=int(limits.events_max_bytes.value) or -1,
        description=EVENTS_DESCRIPTION,
        num_replicas=replicas or 1,
        allow_direct=direct_reads(replicas or 1),
        metadata={WRITER_KEY: version},
    )
    if await _created(js, config):
        return
    await _merge(
        js,
        subjects.STREAM,
        version,
        stream_subjects=list(subjects.STREAM_SUBJECTS),
        max_age_s=limits.events_max_age_s,
        max_bytes=limits.events_max_bytes,
        at_least={"duplicate_window": DUPLICATE_WINDOW_S, "max_msg_size": MAX_EVENT_BYTES},
        description=EVENTS_DESCRIPTION,
    )
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


SHADOW_DESCRIPTION = "Shadow pairs the router mirrored (live call and its mirror's answers)."
SHADOW_MAX_AGE_S = 24 * 60 * 60
"""A day: the promoter judges a shadow phase's pairs within its maxDuration."""
INSUFFICIENT_STORAGE = 10047
"""JetStream's 'insufficient storage resources available': a byte limit beyond the server's."""
SHADOW_DUPLICATE_WINDOW_S = 2 * 60
"""Long enough for a publish retried after a lost ack, short: pair ids are never reused."""


async def _ensure_shadow_stream(
    js: JetStreamContext, replicas: int | None, limits: BusSettings, version: str
) -> None:
    """``PLNT_SHADOW``: the router's pairs, the oldest dropped at a day or at
    ``PLNT_SHADOW_MAX_BYTES`` (discard old: a full stream never refuses a pair)."""
    config = api.StreamConfig(
        name=subjects.SHADOW_STREAM,
        subjects=list(subjects.SHADOW_SUBJECTS),
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.LIMITS,
        discard=api.DiscardPolicy.OLD,
        duplicate_window=SHADOW_DUPLICATE_WINDOW_S,
        max_age=SHADOW_MAX_AGE_S,
        max_bytes=int(limits.shadow_max_bytes.value) or -1,
        description=SHADOW_DESCRIPTION,
        num_replicas=replicas or 1,
        metadata={WRITER_KEY: version},
    )
    if await _created(js, config):
        return
    await _merge(
        js,
        subjects.SHADOW_STREAM,
        version,
        stream_subjects=list(subjects.SHADOW_SUBJECTS),
        max_age_s=Limit(SHADOW_MAX_AGE_S, explicit=False),
        max_bytes=limits.shadow_max_bytes,
        description=SHADOW_DESCRIPTION,
    )
    await _set_replicas(js, subjects.SHADOW_STREAM, replicas)


def _bucket_max_age(bucket: BucketSpec, limits: BusSettings) -> Limit | None:
    """Only the terminal claims may expire: every other bucket holds live state."""
    return limits.sagas_max_age_s if bucket.name == subjects.SAGAS_BUCKET else None


async def _ensure_bucket(
    js: JetStreamContext,
    bucket: BucketSpec,
    replicas: int | None,
    limits: BusSettings,
    version: str,
) -> None:
    try:
        await js.key_value(bucket.name)
    except NotFoundError:  # BucketNotFoundError is one
        await _create_bucket(js, bucket, replicas, limits)
    await _merge(
        js,
        bucket_stream(bucket.name),
        version,
        max_age_s=_bucket_max_age(bucket, limits),
        max_bytes=limits.buckets_max_bytes,
    )
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


async def _create_bucket(
    js: JetStreamContext, bucket: BucketSpec, replicas: int | None, limits: BusSettings
) -> None:
    max_age = _bucket_max_age(bucket, limits)
    try:
        await js.create_key_value(
            bucket=bucket.name,
            history=bucket.history,
            storage=api.StorageType.FILE,
            description=bucket.description,
            replicas=replicas or 1,
            direct=direct_reads(replicas or 1),
            ttl=max_age.value if max_age is not None and max_age.value > 0 else None,
            max_bytes=int(limits.buckets_max_bytes.value) or -1,
        )
    except BadRequestError:  # created concurrently
        await js.key_value(bucket.name)


async def _ensure_object_store(
    js: JetStreamContext, replicas: int | None, limits: BusSettings, version: str
) -> None:
    stream = OBJECT_STORE_STREAM_TEMPLATE.format(bucket=subjects.SPECS_OBJECT_STORE)
    try:
        await js.object_store(subjects.SPECS_OBJECT_STORE)
    except NotFoundError:
        try:
            await js.create_object_store(
                subjects.SPECS_OBJECT_STORE,
                storage=api.StorageType.FILE,
                description="Workflow specs by digest.",
                replicas=replicas or 1,
                max_bytes=int(limits.buckets_max_bytes.value) or -1,
            )
        except BadRequestError:
            await js.object_store(subjects.SPECS_OBJECT_STORE)
    await _merge(js, stream, version, max_bytes=limits.buckets_max_bytes)
    await _set_replicas(js, stream, replicas)


def _filters(config: api.ConsumerConfig) -> list[str]:
    """A consumer's filter subjects, however the server spelled them (one or several)."""
    if config.filter_subjects:
        return sorted(config.filter_subjects)
    return [config.filter_subject] if config.filter_subject else []


CONSUMER_FIELDS = ("ack_wait", "max_deliver", "max_ack_pending", "backoff", "description")
"""The settings of a durable plnt chooses, compared besides its filters."""


def consumer_differs(existing: api.ConsumerConfig, wanted: api.ConsumerConfig) -> bool:
    """Whether ``wanted`` changes what ``existing`` filters or how it delivers."""
    if _filters(existing) != _filters(wanted):
        return True
    return any(
        not _same(getattr(existing, field), getattr(wanted, field))
        for field in CONSUMER_FIELDS
        if getattr(wanted, field) is not None
    )


async def ensure_durable(
    js: JetStreamContext, stream: str, config: api.ConsumerConfig, *, version: str | None = None
) -> None:
    """Create the durable consumer ``config`` names, or rewrite it when it differs and no
    newer plnt version wrote it (``WRITER_KEY`` in its metadata): in a rolling upgrade the
    replicas of two versions share the durable, and the newest's filters and ack wait stay
    whatever order they start in."""
    version = version or plnt_version()
    durable = config.durable_name
    assert durable, "ensure_durable is for durable consumers"
    try:
        existing = (await js.consumer_info(stream, durable)).config
    except NotFoundError:
        existing = None
    if existing is not None:
        if (writer := newer_writer(existing.metadata, version)) is not None:
            log.info("provision.consumer_kept", durable=durable, written_by=writer, own=version)
            return
        if not consumer_differs(existing, config):
            return
    wanted = dataclasses.replace(
        config, metadata=own_metadata(existing.metadata if existing else None, version)
    )
    await js.add_consumer(stream, wanted)  # a durable's create also updates it
    if existing is not None:
        log.info(
            "provision.consumer_updated",
            durable=durable,
            filters=_filters(wanted),
            ack_wait_s=wanted.ack_wait,
            version=version,
        )
