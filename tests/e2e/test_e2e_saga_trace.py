"""One trace per saga, through the real service processes of the embedded stack, exported
over OTLP/HTTP to a real receiver: the watcher's ``run.requested`` starts it, every saga
service's handling of an event is a span in it, child of the span that published the
event; ``status.traceId`` and ``plnt history`` name it; a failed step's span says why."""

import asyncio
import copy
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from stack_fixtures import start_stack
from stack_support import Client, publish_spec, run_document, workflow_named

from plnt_cli.commands import Session, replay
from plnt_cli.supervisor import Supervisor
from plnt_testkit.otlp_receiver import STATUS_ERROR, OtlpReceiver, ReceivedSpan
from plnt_testkit.projections import stored_projections

SPAN_KIND_PRODUCER = 4
SPAN_KIND_CONSUMER = 5
SAGA_SERVICES = ("watcher", "puller", "installer", "smoke", "promoter")
CHAIN = (
    # (event, the service that publishes the next, the next event)
    ("run.requested", "puller", "spec.pulled"),
    ("spec.pulled", "installer", "canary.installed"),
    ("canary.installed", "smoke", "smoke.passed"),
    ("smoke.passed", "promoter", "run.ready"),
)


class ThreadedReceiver:
    """An ``OtlpReceiver`` on its own event loop in a thread: it outlives each test's loop,
    as the module's stack does."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.receiver = OtlpReceiver()

    def __enter__(self) -> "ThreadedReceiver":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.receiver.__aenter__(), self._loop).result(10)
        return self

    def __exit__(self, *_: object) -> None:
        stop = self.receiver.__aexit__(None, None, None)
        asyncio.run_coroutine_threadsafe(stop, self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def wait_for(
        self, done: Callable[[list[ReceivedSpan]], bool], *, what: str, timeout_s: float = 20
    ) -> list[ReceivedSpan]:
        deadline = time.monotonic() + timeout_s
        while True:
            spans = list(self.receiver.spans)
            if done(spans):
                return spans
            if time.monotonic() > deadline:
                got = sorted({f"{s.service}:{s.name}" for s in spans})
                raise AssertionError(f"no {what} within {timeout_s}s; received {got}")
            await asyncio.sleep(0.05)


@pytest.fixture(scope="module")
def receiver() -> Iterator[ThreadedReceiver]:
    with ThreadedReceiver() as threaded:
        yield threaded


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, receiver: ThreadedReceiver
) -> Iterator[Supervisor]:
    """The embedded stack with tracing on: every process exports to ``receiver``."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # export within milliseconds: the tests wait on spans
    }
    supervisor = start_stack(tmp_path_factory.mktemp("traced-stack"), env=env)
    yield supervisor
    supervisor.stop()


def of_saga(spans: Sequence[ReceivedSpan], sagaid: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.attributes.get("plnt.saga_id") == sagaid]


def started(spans: Sequence[ReceivedSpan], sagaid: str) -> ReceivedSpan | None:
    """The watcher's ``publish run.requested`` of ``sagaid``: the saga trace's root."""
    return next(
        (
            span
            for span in of_saga(spans, sagaid)
            if span.service == "plnt-watcher" and span.name == "publish run.requested"
        ),
        None,
    )


def in_trace(spans: Sequence[ReceivedSpan], trace_id: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.trace_id == trace_id]


def named(spans: Sequence[ReceivedSpan], service: str, name: str) -> list[ReceivedSpan]:
    """The spans ``name`` of ``service``: one per handler run (a retried one has more)."""
    found = [s for s in spans if s.service == f"plnt-{service}" and s.name == name]
    assert found, f"no span {name!r} of plnt-{service}"
    return found


def plnt_history(name: str, nats_url: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLNT_", "OTEL_"))}
    result = subprocess.run(
        [sys.executable, "-m", "plnt_cli", "--nats", nats_url, "history", name],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


async def test_a_deploy_is_one_trace_of_every_saga_service_following_the_event_chain(
    client: Client, registry: Path, receiver: ThreadedReceiver, stack: Supervisor
) -> None:
    publish_spec(registry, workflow_named("traced"))
    await client.apply(run_document("traced", registry=registry))
    body = await client.wait_phase("traced", "Ready")
    sagaid = "default.traced.1.1"

    def whole_saga(spans: list[ReceivedSpan]) -> bool:
        root = started(spans, sagaid)
        if root is None:
            return False
        trace = in_trace(spans, root.trace_id)
        names = {(s.service, s.name) for s in trace}
        ids = {s.span_id for s in trace}
        return (
            ("plnt-promoter", "publish run.ready") in names
            and ("plnt-watcher", "process run.ready") in names
            and all(s.parent_id in ids for s in trace if s is not root)  # none in flight
        )

    spans = await receiver.wait_for(whole_saga, what=f"trace of {sagaid} up to run.ready")
    root = started(spans, sagaid)
    assert root is not None
    assert root.parent_id == "" and root.kind == SPAN_KIND_PRODUCER
    trace = in_trace(spans, root.trace_id)

    assert {s.service for s in trace} >= {f"plnt-{name}" for name in SAGA_SERVICES}
    assert {s.attributes["plnt.saga_id"] for s in trace} == {sagaid}
    by_id = {s.span_id: s for s in trace}
    for span in trace:
        assert span.attributes["messaging.system"] == "nats"
        if span.kind == SPAN_KIND_CONSUMER:
            # a handler's span is the child of the span that published its message
            parent = by_id[span.parent_id]
            assert parent.kind == SPAN_KIND_PRODUCER
            assert parent.name == span.name.replace("process ", "publish ", 1)
            assert (
                parent.attributes["messaging.message.id"] == span.attributes["messaging.message.id"]
            )
            assert (
                span.attributes["messaging.destination.name"]
                == parent.attributes["messaging.destination.name"]
            )
        else:
            assert span.kind == SPAN_KIND_PRODUCER, span
            assert span is root or by_id[span.parent_id].kind == SPAN_KIND_CONSUMER, span
    # the chain run.requested -> spec.pulled -> canary.installed -> smoke.passed -> run.ready
    for event, service, next_event in CHAIN:
        handled = {s.span_id for s in named(trace, service, f"process {event}")}
        published = named(trace, service, f"publish {next_event}")
        assert {s.parent_id for s in published} <= handled, (event, next_event)
    for folded in named(trace, "watcher", "process run.requested"):
        assert folded.parent_id == root.span_id

    assert body["status"]["traceId"] == root.trace_id
    assert f"\ntrace {root.trace_id}\n" in plnt_history("traced", stack.config.nats_url)


async def test_a_spec_whose_hash_does_not_match_fails_the_pull_span_in_the_saga_trace(
    client: Client, registry: Path, receiver: ThreadedReceiver
) -> None:
    publish_spec(registry, workflow_named("mismatched"))
    pinned = "sha256:" + "0" * 64
    await client.apply(run_document("mismatched", registry=registry, integrity=pinned))
    body = await client.wait_phase("mismatched", "Failed")
    sagaid = "default.mismatched.1.1"

    def pull_handled(spans: list[ReceivedSpan]) -> bool:
        return any(
            s.service == "plnt-puller" and s.name == "process run.requested"
            for s in of_saga(spans, sagaid)
        )

    spans = await receiver.wait_for(pull_handled, what=f"the pull span of {sagaid}")
    [pull] = named(of_saga(spans, sagaid), "puller", "process run.requested")
    assert pull.trace_id == body["status"]["traceId"]
    assert pull.status_code == STATUS_ERROR
    assert pull.status_message.startswith("IntegrityMismatch: ")
    assert pinned in pull.status_message
    assert pull.events == ("exception",)
    assert pull.attributes["error.type"] == "IntegrityMismatch"


async def test_an_operator_request_joins_the_saga_trace_and_replay_keeps_the_trace_id(
    client: Client, registry: Path, receiver: ThreadedReceiver, stack: Supervisor
) -> None:
    """The watcher publishes an operator's request outside any handler: it continues the
    saga's trace from the projection, as a step's deadline does. Replay restores traceId
    from the headers the stream keeps."""
    name = "gated-trace"
    publish_spec(registry, workflow_named(name))
    publish_spec(registry, workflow_named(name, "2.0.0"))
    document = run_document(name, registry=registry)
    await client.apply(document)
    await client.wait_phase(name, "Ready")
    gated = copy.deepcopy(document)
    gated["spec"]["workflow"]["ref"] = gated["spec"]["workflow"]["ref"].replace("@1.0.0", "@2.0.0")
    gated["spec"]["canary"]["manualGate"] = True
    await client.apply(gated)
    await client.wait_phase(name, "Paused", generation=2, timeout_s=60)

    def with_request(body: dict[str, Any]) -> dict[str, Any]:
        body["metadata"].setdefault("annotations", {})["plnt.work/promote"] = "true"
        return body

    await client.store.mutate("WorkflowRun", "default", name, with_request)
    body = await client.wait_phase(name, "Ready", generation=2, timeout_s=60)
    sagaid = f"default.{name}.2.1"

    def request_handled(spans: list[ReceivedSpan]) -> bool:
        # each process exports its spans in its own batches: the promoter's span can
        # arrive before the watcher's that it is the child of
        names = {(s.service, s.name) for s in of_saga(spans, sagaid)}
        return {
            ("plnt-watcher", "publish promote.requested"),
            ("plnt-promoter", "process promote.requested"),
        } <= names

    spans = await receiver.wait_for(request_handled, what=f"the promote request of {sagaid}")
    root = started(spans, sagaid)
    assert root is not None
    [request] = named(of_saga(spans, sagaid), "watcher", "publish promote.requested")
    assert (request.trace_id, request.parent_id) == (root.trace_id, root.span_id)
    [handled] = named(of_saga(spans, sagaid), "promoter", "process promote.requested")
    assert (handled.trace_id, handled.parent_id) == (root.trace_id, request.span_id)
    assert body["status"]["traceId"] == root.trace_id

    key = f"default.{name}"
    await asyncio.sleep(0.5)  # let the watcher finish writing the run's last events
    before = await stored_projections(client.bus.nc)
    await client.bus.runs.purge(key)
    session = await Session.open(stack.config.nats_url)
    try:
        await replay(session)
    finally:
        await session.close()
    rebuilt = await stored_projections(client.bus.nc)
    assert rebuilt[key].status.trace_id == root.trace_id
    assert rebuilt[key] == before[key]
