"""The embedded resource source: WorkflowRuns in the ``plnt-resources`` KV store."""

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from plnt_common.errors import ResourceNotFound
from plnt_common.resource_store import PLURALS, ResourceStore

KIND = "WorkflowRun"


class EmbeddedSource:
    def __init__(self, store: ResourceStore) -> None:
        self._store = store

    async def watch(self) -> AsyncIterator[tuple[str, str, dict[str, Any] | None]]:
        prefix = PLURALS[KIND] + "."
        async for key, stored in self._store.watch():
            if not key.startswith(prefix):
                continue
            _, namespace, name = key.split(".", 2)
            yield namespace, name, stored.body if stored else None

    async def add_finalizer(
        self,
        *,
        namespace: str,
        name: str,
        finalizer: str,
        pending_status: dict[str, Any] | None = None,
    ) -> None:
        with contextlib.suppress(ResourceNotFound):  # deleted meanwhile: the watch says so
            await self._store.add_finalizer(
                KIND, namespace, name, finalizer, status_if_unset=pending_status
            )

    async def release_finalizer(self, *, namespace: str, name: str, finalizer: str) -> None:
        with contextlib.suppress(ResourceNotFound):
            await self._store.remove_finalizer(KIND, namespace, name, finalizer)

    async def remove_annotations(self, *, namespace: str, name: str, keys: tuple[str, ...]) -> None:
        def without(body: dict[str, Any]) -> dict[str, Any]:
            annotations = body["metadata"].get("annotations") or {}
            body["metadata"]["annotations"] = {
                k: v for k, v in annotations.items() if k not in keys
            }
            return body

        with contextlib.suppress(ResourceNotFound):
            await self._store.mutate(KIND, namespace, name, without)

    async def request_refused(self, *, run: dict[str, Any], message: str) -> None:
        """The embedded store has no Events: the watcher's log line is the record."""

    async def write_status(self, *, namespace: str, name: str, status: dict[str, Any]) -> bool:
        try:
            await self._store.update_status(KIND, namespace, name, status)
        except ResourceNotFound:
            return False
        return True
