"""WorkflowRuns on the Kubernetes API: the console's ``RunAccess`` where the chart runs it.

On Kubernetes the API server holds the WorkflowRuns and the watcher turns an annotation
there into the request event (``kubectl annotate`` takes the same path), so the buttons
read the object with a get and write the annotation with one merge patch on
``metadata.annotations``, as kubectl does. The wait follows the run's projection in
``plnt-runs``, which the watcher folds (and from which it writes the object's status), so
the console needs no watch permission. Failed calls become one message: a 403 names the
verb and resource the console's service account lacks, a 404 the run.

It decides nothing: ``plnt_cli.operate`` refuses, picks the value and waits.
"""

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from typing import Any

from kubernetes import client
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from nats.js.kv import KeyValue
from pydantic import ValidationError

from plnt_common.errors import PlntError, ResourceNotFound
from plnt_common.kube import GROUP, VERSION
from plnt_common.kube_errors import TRANSPORT_ERRORS, ErrorKinds, KubernetesRejected, api_error
from plnt_common.projection import RunProjection, run_key

RUNS = "workflowruns"
RESOURCE = f"{RUNS}.{GROUP}"
MERGE_PATCH = "application/merge-patch+json"


class KubernetesRuns:
    """``RunAccess`` over the API server (reads, annotations) and ``plnt-runs`` (the wait)."""

    def __init__(
        self, *, api: client.ApiClient, runs_bucket: KeyValue, request_timeout_s: float = 30.0
    ) -> None:
        self._objects = client.CustomObjectsApi(api)
        self._runs_bucket = runs_bucket
        self._timeout = request_timeout_s

    async def read(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as the API serves it; None on a 404. Raises ``KubernetesRejected``
        (403 naming the permission) or ``KubernetesUnavailable``."""
        try:
            body: dict[str, Any] = await self._call(
                "get", namespace, name, self._objects.get_namespaced_custom_object
            )
        except ResourceNotFound:
            return None
        return body

    async def annotate(self, *, namespace: str, name: str, key: str, value: str) -> None:
        """One merge patch of ``metadata.annotations``; ``ResourceNotFound`` when gone."""
        patch = {"metadata": {"annotations": {key: value}}}
        try:
            await self._call(
                "patch",
                namespace,
                name,
                self._objects.patch_namespaced_custom_object,
                patch,
                _content_type=MERGE_PATCH,
            )
        except ResourceNotFound:
            raise ResourceNotFound(
                f"workflowruns {name!r} not found in namespace {namespace!r}"
            ) from None

    async def statuses(self, *, namespace: str, name: str) -> AsyncIterator[dict[str, Any] | None]:
        """The run's status in its projection now, then after each change; None once the
        projection is gone or marked removed."""
        key = run_key(namespace, name)
        watcher = await self._runs_bucket.watch(key)  # first: no change after the get is lost
        try:
            seen = 0
            try:
                entry = await self._runs_bucket.get(key)
                seen, current = entry.revision or 0, _projection(entry.value)
            except (KeyNotFoundError, KeyDeletedError):
                current = None
            yield _status(current)
            async for update in watcher:
                if update is None or (update.revision or 0) <= seen:
                    continue  # the end-of-initial-values marker, or what the get returned
                seen = update.revision or 0
                if update.operation in ("DEL", "PURGE"):
                    yield None
                elif (projection := _projection(update.value)) is not None:
                    yield _status(projection)
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]

    async def _call(
        self,
        verb: str,
        namespace: str,
        name: str,
        function: Callable[..., Any],
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        call = functools.partial(
            function,
            GROUP,
            VERSION,
            namespace,
            RUNS,
            name,
            *args,
            _request_timeout=self._timeout,
            **kwargs,
        )
        try:
            return await asyncio.to_thread(call)
        except TRANSPORT_ERRORS as exc:
            raise _translate(exc, verb=verb, namespace=namespace, name=name) from None


def _translate(exc: BaseException, *, verb: str, namespace: str, name: str) -> PlntError:
    kinds = ErrorKinds(
        refused=KubernetesRejected,
        forbidden_hint=(
            f"the console's service account needs {verb} on {RESOURCE} in namespace {namespace!r}"
        ),
    )
    return api_error(exc, doing=f"{verb} {RESOURCE} {namespace}/{name}", kinds=kinds)


def _projection(raw: bytes | None) -> RunProjection | None:
    """The projection in ``raw``; None when empty or unreadable (the next write repairs it)."""
    try:
        return RunProjection.model_validate_json(raw or b"")
    except ValidationError:
        return None


def _status(projection: RunProjection | None) -> dict[str, Any] | None:
    """The status the watcher writes to the object; None for a run gone or removed."""
    if projection is None or projection.removed:
        return None
    return projection.status.model_dump(mode="json", by_alias=True, exclude_none=True)
