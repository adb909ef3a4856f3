"""Helpers for the puller tests: spec documents, registries to publish into, run requests,
and the puller service under test with ways to read what it published.

A plain module (not a conftest) so test modules can import it by a name no other test
directory uses; the fixtures built on it live in this directory's ``conftest.py``.
"""

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml
from nats.js.errors import NotFoundError

from plnt_cli.adapters.oci_target import OciTarget
from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.events import (
    Envelope,
    EventType,
    RunSnapshot,
)
from plnt_common.oci import OciClient
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import PlacementEntry, WorkflowRunSpec, parse_resource
from plnt_puller import app
from plnt_puller.settings import PullerSettings
from plnt_testkit.events import run_requested

RUN_NAME = "review-responder"
WORKFLOW = "review-responder"
VERSION = "1.2.0"
BACKEND = "gpu-cluster-01"
H100 = "nvidia.com/h100"


def workflow_doc(name: str = WORKFLOW, version: str = VERSION) -> dict[str, Any]:
    """The example Workflow of the contract, as a mapping tests may change."""
    return {
        "apiVersion": "microagents.dev/v1",
        "kind": "Workflow",
        "metadata": {"name": name, "version": version},
        "spec": {
            "description": "Draft an on-brand reply to a Google Maps review.",
            "runtime": {
                "image": "ghcr.io/microagents/runner:0.4.0",
                "entrypoint": "python -m review_responder",
            },
            "steps": [
                {"id": "classify_intent", "tool": "llm.classify"},
                {"id": "retrieve_brand_voice", "tool": "rag.query", "deps": ["classify_intent"]},
                {"id": "draft_reply", "tool": "llm.generate", "deps": ["retrieve_brand_voice"]},
                {"id": "safety_check", "tool": "policy.moderate", "deps": ["draft_reply"]},
            ],
            "requirements": {"gpuClass": H100, "gpuCount": 2, "memoryGiB": 40},
        },
    }


SPEC = "workflow.yaml"


def workflow_yaml(document: dict[str, Any] | None = None) -> bytes:
    return yaml.safe_dump(document or workflow_doc(), sort_keys=False).encode()


class SpecSource(Protocol):
    """A registry tests publish specs into; ``url`` is what a WorkflowRun names."""

    kind: str
    url: str

    def publish(
        self, data: bytes, *, name: str = WORKFLOW, version: str = VERSION, file: str = SPEC
    ) -> None:
        """Publish ``data`` as the spec, or as ``file`` beside it (a code archive)."""
        ...

    def location(self, *, name: str = WORKFLOW, version: str = VERSION) -> str:
        """How error messages name the spec's place."""
        ...


@dataclass
class FileSource:
    root: Path
    kind: str = "file"

    @property
    def url(self) -> str:
        return self.root.as_uri()

    def publish(
        self, data: bytes, *, name: str = WORKFLOW, version: str = VERSION, file: str = SPEC
    ) -> None:
        path = self.root / name / version / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def location(self, *, name: str = WORKFLOW, version: str = VERSION) -> str:
        return str(self.root / name / version / "workflow.yaml")


@dataclass
class S3Source:
    client: Any
    bucket: str = "microagents"
    prefix: str = "team-a/specs"
    kind: str = "s3"

    def __post_init__(self) -> None:
        self.client.create_bucket(Bucket=self.bucket)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def publish(
        self, data: bytes, *, name: str = WORKFLOW, version: str = VERSION, file: str = SPEC
    ) -> None:
        key = f"{self.prefix}/{name}/{version}/{file}"
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def location(self, *, name: str = WORKFLOW, version: str = VERSION) -> str:
        return f"{self.url}/{name}/{version}/workflow.yaml"


@dataclass
class OciSource:
    """A real OCI registry (``docker-registry``); files are pushed as ``plnt publish`` pushes
    them (``OciTarget``), each ``publish`` adding or replacing one layer of the artifact."""

    host: str
    docker_config: Path | None = None
    path: str = "team-a/specs"
    kind: str = "oci"

    @property
    def url(self) -> str:
        return f"oci://{self.host}/{self.path}"

    def publish(
        self, data: bytes, *, name: str = WORKFLOW, version: str = VERSION, file: str = SPEC
    ) -> None:
        client = OciClient(docker_config=self.docker_config, attempts=1)
        target = OciTarget(self.url, client=client)
        target.upload(name=name, version=version, files={file: data}, progress=lambda *_: None)

    def location(self, *, name: str = WORKFLOW, version: str = VERSION) -> str:
        return f"{self.host}/{self.path}/{name}:{version}"


def run_snapshot(
    *,
    registry: str,
    ref: str = f"{WORKFLOW}@{VERSION}",
    integrity_hash: str | None = None,
    cluster: str = BACKEND,
    gpu_class: str | None = H100,
    generation: int = 1,
    name: str = RUN_NAME,
) -> RunSnapshot:
    workflow: dict[str, Any] = {"ref": ref, "registry": registry}
    if integrity_hash is not None:
        workflow["integrityHash"] = integrity_hash
    backend: dict[str, Any] = {"cluster": cluster, "gpuCount": 2 if gpu_class else 0}
    if gpu_class is not None:
        backend["gpuClass"] = gpu_class
    spec = WorkflowRunSpec.model_validate({"workflow": workflow, "backend": backend})
    return RunSnapshot(
        namespace="default", name=name, uid="uid-1", generation=generation, spec=spec
    )


def backend_resource(name: str = BACKEND, gpu_classes: tuple[str, ...] = (H100,)) -> Any:
    return parse_resource(
        {
            "apiVersion": "plnt.work/v1",
            "kind": "PlntBackend",
            "metadata": {"name": name},
            "spec": {
                "type": "local",
                "gpuClasses": {
                    gpu: {"resourceName": "nvidia.com/gpu", "capacity": 8} for gpu in gpu_classes
                },
            },
        }
    )


async def stream_events(bus: Bus) -> list[Envelope]:
    """Every event on the stream, in order, read message by message."""
    info = await bus.js.stream_info(subjects.STREAM)
    events = []
    for seq in range(max(info.state.first_seq, 1), info.state.last_seq + 1):
        with contextlib.suppress(NotFoundError):
            msg = await bus.js.get_msg(subjects.STREAM, seq)
            events.append(Envelope.model_validate_json(msg.data or b""))
    return events


@dataclass
class PullerUnderTest:
    """The puller service as a task, plus the test's own bus to drive and observe it."""

    bus: Bus
    settings: PullerSettings
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    def start(self, **overrides: Any) -> None:
        if overrides:
            self.settings = self.settings.model_copy(update=overrides)
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(app.run(self.settings, self._stop))

    async def stop(self) -> None:
        if self._task is not None:
            self._stop.set()
            await asyncio.wait_for(self._task, timeout=15)
            self._task = None

    async def add_backend(
        self, name: str = BACKEND, gpu_classes: tuple[str, ...] = (H100,)
    ) -> None:
        await ResourceStore(self.bus).apply(backend_resource(name, gpu_classes))

    async def request(self, run: RunSnapshot, *, lost: tuple[PlacementEntry, ...] = ()) -> Envelope:
        """Publish ``run.requested`` for ``run`` as the watcher would."""
        event = run_requested(run, lost=lost)
        await self.bus.publish(event)
        return event

    async def outcome(self, request: Envelope, *, timeout_s: float = 20.0) -> Envelope:
        """The first ``spec.pulled`` or ``run.failed`` of ``request``'s saga."""
        answers = {EventType.SPEC_PULLED, EventType.RUN_FAILED}
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            events = await stream_events(self.bus)
            for event in events:
                if event.sagaid == request.sagaid and event.event_type in answers:
                    return event
            if asyncio.get_running_loop().time() > deadline:
                seen = [(e.event_type.value, e.sagaid) for e in events]
                raise AssertionError(f"no outcome for {request.sagaid} in {timeout_s}s: {seen}")
            await asyncio.sleep(0.05)

    async def _stream_seq_of(self, event: Envelope) -> int:
        info = await self.bus.js.stream_info(subjects.STREAM)
        for seq in range(max(info.state.first_seq, 1), info.state.last_seq + 1):
            with contextlib.suppress(NotFoundError):
                msg = await self.bus.js.get_msg(subjects.STREAM, seq)
                if Envelope.model_validate_json(msg.data or b"").id == event.id:
                    return seq
        raise AssertionError(f"{event.type} {event.id} is not on the stream")

    async def events_of(self, event_type: EventType) -> list[Envelope]:
        return [e for e in await stream_events(self.bus) if e.event_type is event_type]

    async def wait_handled(self, request: Envelope, *, timeout_s: float = 20.0) -> None:
        """Until the puller's durable consumer acked every message up to ``request``."""
        upto = await self._stream_seq_of(request)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            with contextlib.suppress(NotFoundError):
                consumer = await self.bus.js.consumer_info(
                    subjects.STREAM, subjects.durable_name(app.SERVICE)
                )
                if consumer.ack_floor.stream_seq >= upto and not consumer.num_ack_pending:
                    return
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"the puller did not ack {request.sagaid} in {timeout_s}s")
            await asyncio.sleep(0.05)
