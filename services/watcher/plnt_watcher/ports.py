"""Where WorkflowRuns come from: the embedded store here, the Kubernetes API later."""

from collections.abc import AsyncIterator
from typing import Any, Protocol


class ResourceSource(Protocol):
    """WorkflowRun objects as the Kubernetes API shows them (apiVersion, metadata, spec, status)."""

    def watch(self) -> AsyncIterator[tuple[str, str, dict[str, Any] | None]]:
        """(namespace, name, body) for every object, then for each change; None body = gone."""

    async def add_finalizer(
        self,
        *,
        namespace: str,
        name: str,
        finalizer: str,
        pending_status: dict[str, Any] | None = None,
    ) -> None:
        """Add ``finalizer`` unless present or the object is being deleted; with
        ``pending_status``, also give an object that has no status yet that one."""

    async def release_finalizer(self, *, namespace: str, name: str, finalizer: str) -> None:
        """Remove ``finalizer``; an object marked for deletion then goes away."""

    async def write_status(self, *, namespace: str, name: str, status: dict[str, Any]) -> bool:
        """Replace the status (status subresource); False when the object is gone."""

    async def remove_annotations(self, *, namespace: str, name: str, keys: tuple[str, ...]) -> None:
        """Drop the annotations ``keys`` (metadata only: the generation stays); gone: no-op."""

    async def request_refused(self, *, run: dict[str, Any], message: str) -> None:
        """Make a refused operator request visible on the run where the source can."""
