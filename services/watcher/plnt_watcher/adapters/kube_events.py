"""Kubernetes Events about WorkflowRuns: one core v1 Event per phase change, and one per
refused operator request (an annotation that had nothing to do).

Best effort, like client-go's event recorder: an Event that cannot be created is logged
and dropped, never allowed to fail the status write that caused it. It decides nothing
about when a phase changed; the source tells it.
"""

import time
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from plnt_common.errors import PlntError
from plnt_common.logs import get_logger
from plnt_common.status import Phase
from plnt_watcher.adapters.kube_api import GROUP, KIND, VERSION, call

log = get_logger(__name__)
WARNING_PHASES = frozenset({Phase.FAILED.value, Phase.ROLLING_BACK.value, Phase.ROLLED_BACK.value})
COMPONENT = "plnt-watcher"
REQUEST_REFUSED = "RequestRefused"


class EventRecorder:
    """Creates Events whose ``involvedObject`` is the WorkflowRun they are about."""

    def __init__(self, *, api: client.ApiClient, instance: str, request_timeout_s: float) -> None:
        self._core = client.CoreV1Api(api)
        self._instance = instance
        self._timeout = float(request_timeout_s)

    async def phase_changed(self, *, run: dict[str, Any], previous: str | None) -> None:
        """Record that ``run`` (as just written) entered its status phase from ``previous``."""
        status = run.get("status") or {}
        phase = str(status.get("phase") or "")
        message = f"phase {previous or 'none'} -> {phase}"
        if status.get("message"):
            message += f": {status['message']}"
        await self._record(run, reason=phase, message=message, warning=phase in WARNING_PHASES)

    async def request_refused(self, *, run: dict[str, Any], message: str) -> None:
        """Record that an operator request on ``run`` was refused, and why."""
        await self._record(run, reason=REQUEST_REFUSED, message=message, warning=True)

    async def _record(
        self, run: dict[str, Any], *, reason: str, message: str, warning: bool
    ) -> None:
        meta = run["metadata"]
        namespace = meta.get("namespace") or "default"
        now = datetime.now(UTC)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(
                # client-go's naming: the object name and a unique hex suffix
                name=f"{meta['name']}.{time.time_ns():x}",
                namespace=namespace,
            ),
            involved_object=client.V1ObjectReference(
                api_version=f"{GROUP}/{VERSION}",
                kind=KIND,
                namespace=namespace,
                name=meta["name"],
                uid=meta.get("uid"),
                resource_version=meta.get("resourceVersion"),
            ),
            reason=reason,
            message=message[:1024],
            type="Warning" if warning else "Normal",
            source=client.V1EventSource(component=COMPONENT, host=self._instance),
            reporting_component=f"{GROUP}/watcher",
            reporting_instance=self._instance,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        try:
            await call(
                self._core.create_namespaced_event,
                namespace,
                event,
                _request_timeout=self._timeout,
            )
        except PlntError as exc:
            log.warning(
                "kubernetes.event_not_recorded",
                namespace=namespace,
                name=meta["name"],
                reason=reason,
                error=str(exc),
            )
