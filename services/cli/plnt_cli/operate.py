"""``plnt promote|abort|rollback``: an annotation on the run, then its phase awaited.

The CLI takes the path a kubectl user takes (``kubectl annotate``): it writes the
annotation on the run (metadata only, the generation stays) and the watcher turns it into
the request event. It refuses first, with the watcher's words, when the run's projection
says there is nothing to do. Where the run lives is a ``RunAccess``: the embedded store
(``StoreRuns``, what ``plnt up`` keeps, the default) or another adapter (the console's
Kubernetes API one); the refusal, the annotation's value and the wait are the same.
"""

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from nats.js.errors import KeyDeletedError, KeyNotFoundError

from plnt_cli.commands import Session
from plnt_common.errors import PlntError, ResourceNotFound
from plnt_common.operations import FULL, Operation, refusal
from plnt_common.projection import RunProjection, run_key
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import WorkflowRun, parse_resource
from plnt_common.status import TERMINAL_PHASES, Phase

KIND = "WorkflowRun"
WAIT_S = 30.0
OUTCOMES = {
    Operation.PROMOTE: ("promoted", Phase.READY),
    Operation.ABORT: ("aborted", Phase.ROLLED_BACK),
    Operation.ROLLBACK: ("rolled back", Phase.REVERTED),
}
"""What each operation is called once done, and the phase it ends in."""


class RunAccess(Protocol):
    """Where a WorkflowRun is read, annotated and followed."""

    async def read(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        """The run's object (metadata, spec, status); None when there is none."""
        ...

    async def annotate(self, *, namespace: str, name: str, key: str, value: str) -> None:
        """Set one annotation (metadata only); raises ``ResourceNotFound`` when gone."""
        ...

    def statuses(self, *, namespace: str, name: str) -> AsyncIterator[dict[str, Any] | None]:
        """The run's status now, then after each change; None once the run is gone."""
        ...


class StoreRuns:
    """``RunAccess`` on the embedded resource store (``plnt-resources``)."""

    def __init__(self, store: ResourceStore) -> None:
        self._store = store

    async def read(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        stored = await self._store.get(KIND, namespace, name)
        return None if stored is None else stored.body

    async def annotate(self, *, namespace: str, name: str, key: str, value: str) -> None:
        def with_annotation(body: dict[str, Any]) -> dict[str, Any]:
            body["metadata"].setdefault("annotations", {})[key] = value
            return body

        await self._store.mutate(KIND, namespace, name, with_annotation)

    async def statuses(self, *, namespace: str, name: str) -> AsyncIterator[dict[str, Any] | None]:
        async for stored in self._store.watch_object(KIND, namespace, name):
            yield None if stored is None else (stored.body.get("status") or {})


async def operate(
    session: Session,
    operation: Operation,
    *,
    name: str,
    namespace: str,
    full: bool = False,
    say: Callable[[str], None],
    wait_s: float = WAIT_S,
    runs: RunAccess | None = None,
) -> str:
    """Ask for ``operation`` on the run and wait until it ended; returns the outcome line.

    ``runs``: where the run lives; None is the session's embedded store.
    """
    runs = runs or StoreRuns(session.store)
    body = await runs.read(namespace=namespace, name=name)
    if body is None:
        raise ResourceNotFound(f"workflowruns {name!r} not found in namespace {namespace!r}")
    run = parse_resource({k: v for k, v in body.items() if k != "status"})
    assert isinstance(run, WorkflowRun)
    projection = await read_projection(session, namespace, name)
    refused = refusal(
        operation,
        projection,
        name=name,
        full=full,
        keep_previous_s=run.spec.rollback.keep_previous_s,
        now=datetime.now(UTC),
    )
    if refused or projection is None:
        raise PlntError(refused)
    value = FULL if full else datetime.now(UTC).isoformat(timespec="milliseconds")
    await runs.annotate(namespace=namespace, name=name, key=operation.annotation, value=value)
    say(f"workflowrun/{name}: {operation.annotation}={value} set; waiting for the saga…")
    status = await ended(runs, namespace, name, projection, say=say, wait_s=wait_s)
    verb, expected = OUTCOMES[operation]
    phase = status.get("phase", "")
    if phase != expected.value:
        raise PlntError(
            f"workflowrun/{name} {operation.value} requested, but it ended {phase}: "
            f"{status.get('message', '')}"
        )
    return f"workflowrun/{name} {verb}: phase {phase}"


async def read_projection(session: Session, namespace: str, name: str) -> RunProjection | None:
    try:
        entry = await session.bus.runs.get(run_key(namespace, name))
    except (KeyNotFoundError, KeyDeletedError):
        return None
    return RunProjection.model_validate_json(entry.value) if entry.value else None


async def ended(
    runs: RunAccess,
    namespace: str,
    name: str,
    before: RunProjection,
    *,
    say: Callable[[str], None],
    wait_s: float,
) -> dict[str, Any]:
    """The run's status once it reached a final phase other than the one it was in."""
    last = before.status.phase.value

    async def watch() -> dict[str, Any]:
        nonlocal last
        async for status in runs.statuses(namespace=namespace, name=name):
            if status is None:
                raise ResourceNotFound(f"workflowruns {name!r} was deleted while waiting")
            phase = status.get("phase", "")
            if phase != last:
                say(
                    f"{name}: {phase}"
                    + (f" ({status['message']})" if status.get("message") else "")
                )
                last = phase
            moved = phase != before.status.phase.value or status.get("sagaId") != before.saga_id
            if moved and phase in {p.value for p in TERMINAL_PHASES}:
                return status
        raise ResourceNotFound(f"workflowruns {name!r} disappeared")

    try:
        return await asyncio.wait_for(watch(), timeout=wait_s)
    except TimeoutError:
        raise PlntError(
            f"timed out after {wait_s:g}s waiting for workflowrun/{name} to move on "
            f"(last phase: {last})"
        ) from None
