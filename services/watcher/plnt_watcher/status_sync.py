"""Status writes that end on the newest projection, however replicas interleave.

Watcher replicas fold events of one run in parallel (they share one durable consumer),
and each writes the status it folded. A replica that folded an older event can write
after one that folded a newer event, and a 409 retry makes that likely: the run would
stay at, say, ``Promoting`` after ``run.ready``. ``ConvergingStatus`` wraps a
``ResourceSource`` so that a status write writes the newest projection, reads it again
afterwards, and writes again while it moved on: the last writer always checks last, so
the resource ends on the newest projection. A briefly older status can still show (and
be recorded as a phase change) when two writes cross. Everything else passes through unchanged.

Every status it writes gets the run's live ``Serving`` condition merged in (``serving``),
which the projection never holds; ``refresh`` rewrites a status when only that changed.

It does not decide what a status says (``logic.status_document`` does) or order events
(the projection fold does).
"""

from collections.abc import AsyncIterator, Callable
from typing import Any

from plnt_common.logs import get_logger
from plnt_watcher.adapters.projections import ProjectionStore
from plnt_watcher.logic import status_document
from plnt_watcher.ports import ResourceSource
from plnt_watcher.serving import Serving, with_serving

log = get_logger(__name__)
MAX_ROUNDS = 5
"""A run whose projection moves this often is being written by other handlers too;
each of them checks after its own write, so stopping here loses nothing."""


class ConvergingStatus:
    """``ResourceSource`` whose ``write_status`` re-checks the projection after writing."""

    def __init__(
        self,
        *,
        source: ResourceSource,
        projections: ProjectionStore,
        serving: Callable[[str, str], Serving | None] | None = None,
    ) -> None:
        self._source = source
        self._projections = projections
        self._serving = serving

    def watch(self) -> AsyncIterator[tuple[str, str, dict[str, Any] | None]]:
        return self._source.watch()

    async def add_finalizer(
        self,
        *,
        namespace: str,
        name: str,
        finalizer: str,
        pending_status: dict[str, Any] | None = None,
    ) -> None:
        await self._source.add_finalizer(
            namespace=namespace, name=name, finalizer=finalizer, pending_status=pending_status
        )

    async def release_finalizer(self, *, namespace: str, name: str, finalizer: str) -> None:
        await self._source.release_finalizer(namespace=namespace, name=name, finalizer=finalizer)

    async def remove_annotations(self, *, namespace: str, name: str, keys: tuple[str, ...]) -> None:
        await self._source.remove_annotations(namespace=namespace, name=name, keys=keys)

    async def request_refused(self, *, run: dict[str, Any], message: str) -> None:
        await self._source.request_refused(run=run, message=message)

    async def write_status(self, *, namespace: str, name: str, status: dict[str, Any]) -> bool:
        """Write the newest projection's status (``status`` when there is none), and again
        while the projection moved on meanwhile. False when the object is gone."""
        newest, revision = await self._projections.read(namespace=namespace, name=name)
        if newest is not None and not newest.removed:
            status = status_document(newest)
        return await self.write_folded(
            namespace=namespace, name=name, status=status, revision=revision
        )

    async def write_folded(
        self, *, namespace: str, name: str, status: dict[str, Any], revision: int
    ) -> bool:
        """Write the status folded at projection ``revision``, then converge on the newest."""
        if not await self._write(namespace, name, status):
            return False
        return await self._converge(namespace=namespace, name=name, revision=revision)

    async def refresh(self, namespace: str, name: str) -> None:
        """Rewrite the status from the newest projection, for a changed ``Serving``.

        Left alone: a run without a projection, and one whose saga is in flight (its next
        event's status write carries the condition, so a deploy costs no extra write).
        """
        newest, revision = await self._projections.read(namespace=namespace, name=name)
        if newest is not None and not newest.removed and not newest.saga_active:
            await self.write_folded(
                namespace=namespace, name=name, status=status_document(newest), revision=revision
            )

    async def _write(self, namespace: str, name: str, status: dict[str, Any]) -> bool:
        if self._serving is not None:
            status = with_serving(status, self._serving(namespace, name))
        return await self._source.write_status(namespace=namespace, name=name, status=status)

    async def _converge(self, *, namespace: str, name: str, revision: int) -> bool:
        """After writing the status folded at ``revision``: while the projection moved on,
        write the newest. Its revision tells whether it moved: only then is it decoded."""
        for _ in range(MAX_ROUNDS):
            now = await self._projections.revision(namespace=namespace, name=name)
            if now in (0, revision):
                return True
            log.info("status.rewritten", namespace=namespace, name=name)
            newest, revision = await self._projections.read(namespace=namespace, name=name)
            if newest is None or newest.removed:
                return True  # removed meanwhile: the handler of that event finishes the run
            if not await self._write(namespace, name, status_document(newest)):
                return False
        return True
