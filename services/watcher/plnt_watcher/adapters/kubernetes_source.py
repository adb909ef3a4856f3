"""The Kubernetes resource source: WorkflowRuns from the API server, by the official client.

``watch`` lists, then watches from the list's resourceVersion with bookmarks, resumes
from the last version it saw when a watch request ends, and when the server answers 410
Gone (its history no longer reaches back that far) lists again and reports against
what it had reported: objects that vanished meanwhile come out as deletions, then every
listed object (as an informer's resync, so the consumer can repair a stale status).
Finalizers are patched with a resourceVersion precondition and status is written
through the status subresource, both retried on 409; a status write the server refuses
retryably is retried with backoff until written or the run is gone. A phase change is
recorded as a Kubernetes Event.

It decides nothing (``logic.py`` does) and runs no matter who leads (``leader.py``).
"""

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from plnt_common.errors import Conflict, ResourceNotFound
from plnt_common.logs import get_logger
from plnt_watcher.adapters.kube_api import (
    GROUP,
    MERGE_PATCH,
    RUNS,
    VERSION,
    Gone,
    KubernetesRejected,
    KubernetesUnavailable,
    call,
)
from plnt_watcher.adapters.kube_events import EventRecorder
from plnt_watcher.adapters.kube_watch import OpenStream, watch_events
from plnt_watcher.backoff import STATUS_RETRIES, Backoff

log = get_logger(__name__)
CONFLICT_ATTEMPTS = 10
LIST_PAGE_SIZE = 500
"""Objects per list page, as client-go's informers ask; 0 lists all in one answer."""
STATUS_BACKOFF = Backoff(base_s=0.5, cap_s=10.0)
"""Retries of a refused status write: a 30 s outage is repaired within ~10 s of its end."""
Key = tuple[str, str]
Change = tuple[str, str, dict[str, Any] | None]


@dataclass(frozen=True)
class Seen:
    """What was last reported for one object."""

    uid: str
    resource_version: str


def key_of(body: Mapping[str, Any]) -> Key:
    meta = body["metadata"]
    return str(meta.get("namespace") or "default"), str(meta["name"])


def relist_changes(
    seen: Mapping[Key, Seen], items: list[dict[str, Any]], *, everything: bool
) -> list[Change]:
    """What a fresh list means to a reader that has reported ``seen``.

    First a deletion for every object that is gone, or was replaced by a new object of
    the same name (another uid); then each listed object that is new or changed, or every
    listed object when ``everything`` (a restarted reader cannot know what its consumer
    finished).
    """
    listed = {key_of(item): item for item in items}
    changes: list[Change] = []
    for key, was in sorted(seen.items()):
        now = listed.get(key)
        if now is None or now["metadata"].get("uid") != was.uid:
            changes.append((*key, None))
    for key, item in sorted(listed.items()):
        reported = seen.get(key)
        same = (
            reported is not None
            and reported.uid == item["metadata"].get("uid")
            and reported.resource_version == item["metadata"].get("resourceVersion")
        )
        if everything or not same:
            changes.append((*key, item))
    return changes


class KubernetesSource:
    """``ResourceSource`` over the Kubernetes API; one instance per watcher process."""

    def __init__(
        self,
        *,
        api: client.ApiClient,
        namespace: str = "",
        watch_timeout_s: int = 300,
        request_timeout_s: float = 30.0,
        recorder: EventRecorder | None = None,
        conflict_attempts: int = CONFLICT_ATTEMPTS,
        status_backoff: Backoff = STATUS_BACKOFF,
        list_page_size: int = LIST_PAGE_SIZE,
    ) -> None:
        self._objects = client.CustomObjectsApi(api)
        self._namespace = namespace
        self._watch_timeout_s = int(watch_timeout_s)
        self._timeout = float(request_timeout_s)
        self._recorder = recorder
        self._attempts = conflict_attempts
        self._status_backoff = status_backoff
        self._page_size = list_page_size
        self._seen: dict[Key, Seen] = {}
        """Reported state that outlives one ``watch()`` call, so a deletion that happens
        while no watch runs is still reported by the next list."""

    # --- watch -------------------------------------------------------------------------

    async def watch(self) -> AsyncIterator[tuple[str, str, dict[str, Any] | None]]:
        """Every object, then each change; None body = gone. Raises ``PlntError`` when the
        API server cannot be reached (the caller restarts it)."""
        items, version = await self._list()
        for change in relist_changes(self._seen, items, everything=True):
            yield change
            self._commit(change)  # only once the consumer is done with it and asks for more
        while True:
            try:
                # aclosing: leaving the loop by an exception ends the request at once.
                async with contextlib.aclosing(watch_events(self._open_watch(version))) as events:
                    async for event in events:
                        kind = event.get("type")
                        body: dict[str, Any] = event.get("object") or {}
                        if kind == "ERROR":
                            raise self._watch_error(body)
                        version = body.get("metadata", {}).get("resourceVersion") or version
                        if kind not in ("ADDED", "MODIFIED", "DELETED"):
                            continue  # BOOKMARK: only the version moves
                        namespace, name = key_of(body)
                        change = (namespace, name, None if kind == "DELETED" else body)
                        yield change
                        self._commit(change)
            except Gone:
                log.info("resources.relist", reason="watch position expired", version=version)
                items, version = await self._list()
                # every object again, as an informer's resync does: the consumer compares
                # each run's status with its projection (a write refused meanwhile)
                for change in relist_changes(self._seen, items, everything=True):
                    yield change
                    self._commit(change)

    def _commit(self, change: Change) -> None:
        namespace, name, body = change
        if body is None:
            self._seen.pop((namespace, name), None)
        else:
            meta = body["metadata"]
            self._seen[(namespace, name)] = Seen(
                uid=str(meta.get("uid") or ""),
                resource_version=str(meta.get("resourceVersion") or ""),
            )

    @staticmethod
    def _watch_error(status: dict[str, Any]) -> Exception:
        code, message = status.get("code"), status.get("message", "")
        if code == 410:
            return Gone(str(message))
        return KubernetesUnavailable(f"watch failed with {code}: {message}")

    async def _list(self) -> tuple[list[dict[str, Any]], str]:
        """Every object, a page of ``list_page_size`` at a time, and the list's version.

        A continue token that expired between pages (410) starts the list over.
        """
        while True:
            try:
                return await self._list_pages()
            except Gone as exc:
                log.info("resources.relist", reason="continue token expired", error=str(exc))
            except ResourceNotFound:
                raise KubernetesRejected(
                    f"the API server does not serve {RUNS}.{GROUP}/{VERSION}: is the CRD "
                    "installed? (kubectl apply -f crds/)"
                ) from None

    async def _list_pages(self) -> tuple[list[dict[str, Any]], str]:
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            listed = await self._list_call(token)
            items.extend(listed.get("items") or [])
            meta = listed["metadata"]
            token = str(meta.get("continue") or "")
            if not token:
                return items, str(meta["resourceVersion"])

    async def _list_call(self, token: str) -> Any:
        paging: dict[str, Any] = {"_request_timeout": self._timeout}
        if self._page_size:
            paging["limit"] = self._page_size
        if token:
            paging["_continue"] = token
        if self._namespace:
            return await call(
                self._objects.list_namespaced_custom_object,
                GROUP,
                VERSION,
                self._namespace,
                RUNS,
                **paging,
            )
        return await call(self._objects.list_cluster_custom_object, GROUP, VERSION, RUNS, **paging)

    def _open_watch(self, version: str) -> OpenStream:
        options: dict[str, Any] = {
            "watch": True,
            "resource_version": version,
            "allow_watch_bookmarks": True,
            "timeout_seconds": self._watch_timeout_s,
            "_preload_content": False,
            # A read that hears nothing well past the server's own timeout is a dead peer.
            "_request_timeout": (self._timeout, float(self._watch_timeout_s) + self._timeout),
        }
        if self._namespace:
            return functools.partial(
                self._objects.list_namespaced_custom_object,
                GROUP,
                VERSION,
                self._namespace,
                RUNS,
                **options,
            )
        return functools.partial(
            self._objects.list_cluster_custom_object, GROUP, VERSION, RUNS, **options
        )

    # --- writes ------------------------------------------------------------------------

    async def _get(self, namespace: str, name: str) -> dict[str, Any]:
        """The object now; raises ``ResourceNotFound``."""
        found: dict[str, Any] = await call(
            self._objects.get_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            RUNS,
            name,
            _request_timeout=self._timeout,
        )
        return found

    async def _after_conflict(self, attempt: int) -> None:
        await asyncio.sleep(min(0.05 * (attempt + 1), 0.5))

    async def _edit_finalizers(
        self,
        namespace: str,
        name: str,
        edit: Callable[[list[str], dict[str, Any]], list[str]],
    ) -> None:
        """Patch ``metadata.finalizers`` to ``edit(current, metadata)``, on the version read.

        A gone object is left alone; a conflict reads again; ``Conflict`` after
        ``conflict_attempts`` tries.
        """
        for attempt in range(self._attempts):
            try:
                current = await self._get(namespace, name)
            except ResourceNotFound:
                return
            meta = current["metadata"]
            finalizers = list(meta.get("finalizers") or [])
            wanted = edit(finalizers, meta)
            if wanted == finalizers:
                return
            # resourceVersion in a merge patch is a precondition: the server answers 409
            # when the object changed since it was read.
            patch = {"metadata": {"resourceVersion": meta["resourceVersion"], "finalizers": wanted}}
            try:
                await self._merge_patch(namespace, name, patch)
            except ResourceNotFound:
                return
            except Conflict:
                log.info("kubernetes.finalizer_conflict", namespace=namespace, name=name)
                await self._after_conflict(attempt)
                continue
            return
        raise Conflict(
            f"WorkflowRun {namespace}/{name} kept changing while its finalizers were edited"
        )

    async def add_finalizer(
        self,
        *,
        namespace: str,
        name: str,
        finalizer: str,
        pending_status: dict[str, Any] | None = None,
    ) -> None:
        """Add ``finalizer`` unless present or the object is being deleted; None if gone.

        Finalizers and status are separate writes in the API (the status subresource):
        ``pending_status`` follows the finalizer when the object still has no status.
        """

        def add(finalizers: list[str], meta: dict[str, Any]) -> list[str]:
            if finalizer in finalizers or meta.get("deletionTimestamp"):
                return finalizers
            return [*finalizers, finalizer]

        await self._edit_finalizers(namespace, name, add)
        if pending_status is not None:
            await self._replace_status(namespace, name, pending_status, only_if_unset=True)

    async def release_finalizer(self, *, namespace: str, name: str, finalizer: str) -> None:
        """Remove ``finalizer``; an object marked for deletion with none left goes away."""
        await self._edit_finalizers(
            namespace, name, lambda finalizers, _: [f for f in finalizers if f != finalizer]
        )

    async def remove_annotations(self, *, namespace: str, name: str, keys: tuple[str, ...]) -> None:
        """A merge patch of nulls: removing an annotation twice, or from a gone run, is fine."""
        patch = {"metadata": {"annotations": dict.fromkeys(keys)}}
        with contextlib.suppress(ResourceNotFound):
            await self._merge_patch(namespace, name, patch)

    async def _merge_patch(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        await call(
            self._objects.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            RUNS,
            name,
            patch,
            _content_type=MERGE_PATCH,
            _request_timeout=self._timeout,
        )

    async def request_refused(self, *, run: dict[str, Any], message: str) -> None:
        if self._recorder is not None:
            await self._recorder.request_refused(run=run, message=message)

    async def write_status(self, *, namespace: str, name: str, status: dict[str, Any]) -> bool:
        """Replace the status through the status subresource, on the version read.

        Returns False when the object is gone; raises ``Conflict`` after
        ``conflict_attempts`` conflicting writes. ``status`` is written as given,
        ``observedGeneration`` included. A write the API server refuses retryably (5xx,
        429, a timeout, a refused connection) is retried with backoff until it is
        written or the object is gone: a short API outage must not leave a stale phase.
        ``KubernetesRejected`` (a 422, say) is raised at once.
        """
        failures = 0
        while True:
            try:
                return await self._replace_status(namespace, name, status)
            except KubernetesUnavailable as exc:
                failures += 1
                delay = self._status_backoff.delay(failures)
                STATUS_RETRIES.inc()
                log.warning(
                    "kubernetes.status_retry",
                    namespace=namespace,
                    name=name,
                    error=str(exc),
                    failures=failures,
                    delay_s=round(delay, 3),
                )
                await asyncio.sleep(delay)

    async def _replace_status(
        self, namespace: str, name: str, status: dict[str, Any], *, only_if_unset: bool = False
    ) -> bool:
        for attempt in range(self._attempts):
            try:
                current = await self._get(namespace, name)
            except ResourceNotFound:
                return False
            previous = current.get("status") or {}
            if previous == status or (only_if_unset and previous):
                return True
            try:
                written: dict[str, Any] = await call(
                    self._objects.replace_namespaced_custom_object_status,
                    GROUP,
                    VERSION,
                    namespace,
                    RUNS,
                    name,
                    {**current, "status": status},
                    _request_timeout=self._timeout,
                )
            except ResourceNotFound:
                return False
            except Conflict:
                log.info("kubernetes.status_conflict", namespace=namespace, name=name)
                await self._after_conflict(attempt)
                continue
            if self._recorder is not None and previous.get("phase") != status.get("phase"):
                await self._recorder.phase_changed(run=written, previous=previous.get("phase"))
            return True
        raise Conflict(f"WorkflowRun {namespace}/{name} kept changing while its status was written")
