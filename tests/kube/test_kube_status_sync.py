"""Status writes from replicas that folded different events end on the newest projection."""

from collections.abc import AsyncIterator
from typing import Any

import pytest

from plnt_common.bus.bus import Bus
from plnt_common.projection import RunProjection
from plnt_common.resources import WorkflowRunStatus
from plnt_common.status import Phase
from plnt_watcher.adapters.projections import ProjectionStore
from plnt_watcher.logic import status_document
from plnt_watcher.status_sync import ConvergingStatus


class RecordingSource:
    """A ResourceSource that records status writes; ``gone`` makes them return False."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self.gone = False

    async def watch(self) -> AsyncIterator[tuple[str, str, dict[str, Any] | None]]:
        if False:  # pragma: no cover - a source with nothing in it
            yield ("", "", None)

    async def add_finalizer(
        self,
        *,
        namespace: str,
        name: str,
        finalizer: str,
        pending_status: dict[str, Any] | None = None,
    ) -> None:
        return None

    async def release_finalizer(self, *, namespace: str, name: str, finalizer: str) -> None:
        return None

    async def write_status(self, *, namespace: str, name: str, status: dict[str, Any]) -> bool:
        if self.gone:
            return False
        self.written.append(status["phase"])
        return True


def projection(phase: Phase) -> RunProjection:
    return RunProjection(
        namespace="default",
        name="a",
        saga_id="default.a.1.1",
        generation=1,
        status=WorkflowRunStatus(phase=phase, observed_generation=1),
    )


@pytest.fixture
async def projections(nats_url: str) -> AsyncIterator[ProjectionStore]:
    """The ``plnt-runs`` bucket holding run ``default/a`` at phase Ready."""
    bus = await Bus.open(nats_url, service="test")
    await bus.runs.put("default.a", projection(Phase.READY).model_dump_json().encode())
    yield ProjectionStore(bus.runs)
    await bus.close()


async def test_a_handler_holding_an_older_fold_writes_the_newest_projection(
    projections: ProjectionStore,
) -> None:
    source = RecordingSource()
    converging = ConvergingStatus(source=source, projections=projections)

    stale = status_document(projection(Phase.PROMOTING))
    assert await converging.write_status(namespace="default", name="a", status=stale)

    assert source.written == ["Ready"]


async def test_a_current_write_is_written_once(projections: ProjectionStore) -> None:
    source = RecordingSource()
    converging = ConvergingStatus(source=source, projections=projections)

    current = status_document(projection(Phase.READY))
    assert await converging.write_status(namespace="default", name="a", status=current)

    assert source.written == ["Ready"]


async def test_a_projection_that_moves_during_the_write_is_written_again(
    projections: ProjectionStore, nats_url: str
) -> None:
    bus = await Bus.open(nats_url, service="test-mover")
    source = RecordingSource()
    original = source.write_status

    async def write_then_move(*, namespace: str, name: str, status: dict[str, Any]) -> bool:
        written = await original(namespace=namespace, name=name, status=status)
        if len(source.written) == 1:  # another replica folds the next event meanwhile
            moved = projection(Phase.FAILED).model_dump_json().encode()
            await bus.runs.put("default.a", moved)
        return written

    source.write_status = write_then_move  # type: ignore[method-assign]
    converging = ConvergingStatus(source=source, projections=projections)

    current = status_document(projection(Phase.READY))
    assert await converging.write_status(namespace="default", name="a", status=current)
    await bus.close()

    assert source.written == ["Ready", "Failed"]


async def test_a_gone_object_stops_at_the_first_write(projections: ProjectionStore) -> None:
    source = RecordingSource()
    source.gone = True
    converging = ConvergingStatus(source=source, projections=projections)

    stale = status_document(projection(Phase.PROMOTING))
    assert await converging.write_status(namespace="default", name="a", status=stale) is False
    assert source.written == []
