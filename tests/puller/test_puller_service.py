"""The puller service end to end: real nats-server, real registries, ``app.run`` as a task.

Each test publishes ``run.requested`` as the watcher would and reads the outcome from the
stream: ``spec.pulled`` with the stored spec, or ``run.failed`` with the reason and a
message naming the problem.
"""

import time
from typing import Any

import pytest
from nats.js.errors import ObjectNotFoundError
from puller_support import (
    BACKEND,
    H100,
    RUN_NAME,
    VERSION,
    WORKFLOW,
    FileSource,
    PullerUnderTest,
    S3Source,
    SpecSource,
    run_snapshot,
    workflow_doc,
    workflow_yaml,
)

from plnt_common import subjects
from plnt_common.bus.saga import advance_latest_saga
from plnt_common.events import (
    Envelope,
    EventType,
    RunFailed,
    SpecPulled,
    follow_up,
    saga_id,
)
from plnt_common.nats_server import free_port
from plnt_common.saga import TerminalClaim
from plnt_common.status import Reason
from plnt_common.workflow import MAX_SPEC_BYTES, spec_digest
from plnt_testkit.events import run_requested


def failure_of(event: Envelope) -> RunFailed:
    assert event.event_type is EventType.RUN_FAILED, event.data
    payload = event.payload()
    assert isinstance(payload, RunFailed)
    assert payload.phase == "Pulling"
    return payload


async def assert_nothing_pulled_or_stored(puller: PullerUnderTest, data: bytes) -> None:
    assert await puller.events_of(EventType.SPEC_PULLED) == []
    with pytest.raises(ObjectNotFoundError):
        await puller.bus.specs.get_info(spec_digest(data))


# --- success -------------------------------------------------------------------------


@pytest.mark.parametrize("pinned", [False, True], ids=["unpinned", "integrity-pinned"])
async def test_a_valid_spec_is_stored_by_digest_and_announced_as_spec_pulled(
    puller: PullerUnderTest, source: SpecSource, pinned: bool
) -> None:
    data = workflow_yaml()
    source.publish(data)
    digest = spec_digest(data)
    run = run_snapshot(registry=source.url, integrity_hash=digest if pinned else None)
    request = await puller.request(run)

    outcome = await puller.outcome(request)

    assert outcome.event_type is EventType.SPEC_PULLED, outcome.data
    pulled = outcome.payload()
    assert isinstance(pulled, SpecPulled)
    assert pulled.spec_digest == digest
    assert (pulled.workflow_name, pulled.workflow_version) == (WORKFLOW, VERSION)
    assert pulled.revision == f"{VERSION}-g1"
    assert pulled.run == run
    assert pulled.backend_name == BACKEND
    assert H100 in pulled.backend.gpu_classes
    assert outcome.causationid == request.id
    stored = await puller.bus.specs.get(digest)
    assert stored.data == data


async def test_redelivery_after_success_publishes_no_second_spec_pulled(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    data = workflow_yaml()
    file_source.publish(data)
    request = await puller.request(run_snapshot(registry=file_source.url))
    await puller.outcome(request)
    await puller.wait_handled(request)
    first = await puller.bus.specs.get_info(spec_digest(data))

    # Forget the consumer's acks, so the restarted puller is handed run.requested again.
    await puller.stop()
    await puller.bus.js.delete_consumer(subjects.STREAM, subjects.durable_name("puller"))
    puller.start()
    await puller.wait_handled(request)

    consumer = await puller.bus.js.consumer_info(subjects.STREAM, subjects.durable_name("puller"))
    assert consumer.delivered.stream_seq >= 1  # the request really went through a second time
    assert len(await puller.events_of(EventType.SPEC_PULLED)) == 1
    assert (await puller.bus.specs.get(spec_digest(data))).data == data
    again = await puller.bus.specs.get_info(spec_digest(data))
    assert again.nuid == first.nuid  # the stored spec was found, not written again


# --- the spec refused ----------------------------------------------------------------


async def test_an_integrity_mismatch_fails_the_run_naming_both_digests(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    data = workflow_yaml()
    file_source.publish(data)
    pinned = "sha256:" + "0" * 64
    request = await puller.request(run_snapshot(registry=file_source.url, integrity_hash=pinned))

    failure = failure_of(await puller.outcome(request))

    assert failure.reason is Reason.INTEGRITY_MISMATCH
    assert pinned in failure.message
    assert spec_digest(data) in failure.message
    await assert_nothing_pulled_or_stored(puller, data)


def _cyclic() -> dict[str, Any]:
    doc = workflow_doc()
    doc["spec"]["steps"][0]["deps"] = ["safety_check"]
    return doc


def _unknown_tool() -> dict[str, Any]:
    doc = workflow_doc()
    doc["spec"]["steps"][1]["tool"] = "shell.exec"
    return doc


INVALID_SPECS = [
    pytest.param(
        workflow_yaml(_cyclic()),
        "steps form a cycle: classify_intent -> safety_check",
        id="cyclic-steps",
    ),
    pytest.param(workflow_yaml(_unknown_tool()), "unknown tool 'shell.exec'", id="unknown-tool"),
    pytest.param(b"spec: [unclosed\n  - x: {", "not valid YAML", id="malformed-yaml"),
    pytest.param(
        workflow_yaml(workflow_doc(name="other-workflow")),
        f"declares other-workflow@{VERSION}, but the run references {WORKFLOW}@{VERSION}",
        id="name-mismatch",
    ),
    pytest.param(
        workflow_yaml(workflow_doc(version="1.3.0")),
        f"declares {WORKFLOW}@1.3.0, but the run references {WORKFLOW}@{VERSION}",
        id="version-mismatch",
    ),
    pytest.param(
        b"#" * (MAX_SPEC_BYTES + 1),
        f"is {MAX_SPEC_BYTES + 1} bytes, over the {MAX_SPEC_BYTES}-byte bound",
        id="oversize",
    ),
]


@pytest.mark.parametrize(("data", "problem"), INVALID_SPECS)
async def test_an_invalid_spec_fails_the_run_at_once_naming_the_problem(
    puller: PullerUnderTest, file_source: FileSource, data: bytes, problem: str
) -> None:
    file_source.publish(data)
    request = await puller.request(run_snapshot(registry=file_source.url))

    failure = failure_of(await puller.outcome(request))

    assert failure.reason is Reason.SPEC_INVALID
    assert problem in failure.message
    assert f"{WORKFLOW}@{VERSION}" in failure.message
    await assert_nothing_pulled_or_stored(puller, data)
    consumer = await puller.bus.js.consumer_info(subjects.STREAM, subjects.durable_name("puller"))
    assert consumer.delivered.consumer_seq == 1  # failed at once, not retried


async def test_an_oversize_spec_on_s3_fails_the_run_naming_its_size(
    puller: PullerUnderTest, s3_source: S3Source
) -> None:
    data = b"#" * (MAX_SPEC_BYTES * 2)
    s3_source.publish(data)
    request = await puller.request(run_snapshot(registry=s3_source.url))

    failure = failure_of(await puller.outcome(request))

    assert failure.reason is Reason.SPEC_INVALID
    assert f"{s3_source.location()} is {len(data)} bytes" in failure.message


# --- the spec not there ----------------------------------------------------------------


async def test_a_missing_spec_fails_the_run_as_spec_not_found(
    puller: PullerUnderTest, source: SpecSource
) -> None:
    source.publish(workflow_yaml(), version="1.0.0")  # another version, not the one asked for
    request = await puller.request(run_snapshot(registry=source.url))

    failure = failure_of(await puller.outcome(request))

    assert failure.reason is Reason.SPEC_NOT_FOUND
    assert source.location() in failure.message


async def test_a_missing_bucket_fails_the_run_as_spec_not_found(
    puller: PullerUnderTest, s3_source: S3Source
) -> None:
    request = await puller.request(run_snapshot(registry="s3://no-such-bucket/specs"))

    failure = failure_of(await puller.outcome(request))

    assert failure.reason is Reason.SPEC_NOT_FOUND
    assert f"s3://no-such-bucket/specs/{WORKFLOW}/{VERSION}/workflow.yaml" in failure.message


async def test_an_unreachable_s3_endpoint_fails_the_run_after_bounded_retries(
    puller: PullerUnderTest,
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there: connection refused
    await puller.stop()
    puller.start(s3_endpoint_url=dead, s3_max_attempts=2, connect_timeout_s=0.5, max_attempts=2)
    started = time.monotonic()
    request = await puller.request(run_snapshot(registry="s3://microagents"))

    failure = failure_of(await puller.outcome(request))

    assert time.monotonic() - started < 15
    assert failure.reason is Reason.REGISTRY_UNAVAILABLE
    assert "after 2 attempts" in failure.message
    assert dead in failure.message
    consumer = await puller.bus.js.consumer_info(subjects.STREAM, subjects.durable_name("puller"))
    assert consumer.delivered.consumer_seq == 2  # exactly max_attempts deliveries
    assert await puller.events_of(EventType.SPEC_PULLED) == []


# --- the backend refused --------------------------------------------------------------


async def test_an_unknown_backend_fails_the_run_as_backend_unavailable(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    data = workflow_yaml()
    file_source.publish(data)
    request = await puller.request(run_snapshot(registry=file_source.url, cluster="nowhere"))

    failure = failure_of(await puller.outcome(request))

    assert failure.reason is Reason.BACKEND_UNAVAILABLE
    assert "PlntBackend 'nowhere' not found" in failure.message
    await assert_nothing_pulled_or_stored(puller, data)


async def test_a_gpu_class_the_backend_does_not_offer_fails_the_run_naming_the_offered_ones(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    await puller.add_backend("a100-pool", gpu_classes=("nvidia.com/a100", "nvidia.com/l4"))
    file_source.publish(workflow_yaml())
    request = await puller.request(run_snapshot(registry=file_source.url, cluster="a100-pool"))

    failure = failure_of(await puller.outcome(request))

    assert failure.reason is Reason.BACKEND_UNAVAILABLE
    assert f"does not offer gpuClass '{H100}'" in failure.message
    assert "offered: nvidia.com/a100, nvidia.com/l4" in failure.message


async def test_a_run_without_a_gpu_class_is_pulled_for_a_backend_without_gpus(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    await puller.add_backend("cpu-only", gpu_classes=())
    file_source.publish(workflow_yaml())
    run = run_snapshot(registry=file_source.url, cluster="cpu-only", gpu_class=None)
    request = await puller.request(run)

    outcome = await puller.outcome(request)

    assert outcome.event_type is EventType.SPEC_PULLED, outcome.data


# --- saga state ------------------------------------------------------------------------


async def test_a_superseded_saga_fails_as_superseded_without_pulling(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    data = workflow_yaml()
    file_source.publish(data)
    # the watcher records a newer generation's saga as the run's latest before publishing it
    await advance_latest_saga(puller.bus, "default", RUN_NAME, saga_id("default", RUN_NAME, 2))
    request = await puller.request(run_snapshot(registry=file_source.url, generation=1))

    failure = failure_of(await puller.outcome(request))

    assert failure.reason is Reason.SUPERSEDED
    await assert_nothing_pulled_or_stored(puller, data)


async def test_an_ended_saga_is_acked_without_any_outcome(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    data = workflow_yaml()
    file_source.publish(data)
    run = run_snapshot(registry=file_source.url)
    # Another service already ended this saga with a terminal event.
    await puller.bus.sagas.create(saga_id("default", RUN_NAME, 1), b"run.failed")
    request = await puller.request(run)

    await puller.wait_handled(request)

    assert await puller.events_of(EventType.RUN_FAILED) == []
    await assert_nothing_pulled_or_stored(puller, data)


async def test_a_failure_claimed_before_a_crash_is_published_when_the_request_comes_back(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    """An earlier delivery claimed run.failed, then died before publishing it."""
    run = run_snapshot(registry=file_source.url)  # nothing published there: SpecNotFound
    request = run_requested(run)
    claimed = follow_up(
        request,
        EventType.RUN_FAILED,
        RunFailed(reason=Reason.SPEC_NOT_FOUND, message="claimed, never published"),
        source="puller",
    )
    await puller.bus.sagas.create(request.sagaid, TerminalClaim.of(claimed).encode())
    await puller.bus.publish(request)

    await puller.wait_handled(request)

    failures = await puller.events_of(EventType.RUN_FAILED)
    assert [failure.id for failure in failures] == [claimed.id]
