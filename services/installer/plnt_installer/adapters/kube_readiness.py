"""Deployment status read from the Kubernetes API: implements ``DeploymentReadiness``.

One read returns the Deployment's generation and replica counts, plus (while it is not
ready) the reasons its pods are not running: a container waiting (ImagePullBackOff,
CrashLoopBackOff, ...) or a pod the scheduler cannot place. ``services`` lists the plnt
runner Services of a namespace with their ready and not-ready endpoint addresses, for
the ``HelmObserver``. It does not judge readiness (``readiness.judge`` and
``helm_observer.observation`` do) and does not wait (the callers poll). The
``kubernetes`` client blocks, so each call runs on a worker thread with a request timeout.
"""

import asyncio
import functools
import json
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from plnt_common.kube_errors import TRANSPORT_ERRORS, api_error
from plnt_installer.adapters.helm_values import RUN_NAMESPACE, RUNNER_SERVICE_PORT, SAGA_ID
from plnt_installer.adapters.kube_errors import INSTALLER_ERRORS
from plnt_installer.helm_observer import ServiceState
from plnt_installer.readiness import DeploymentState

REQUEST_TIMEOUT_S = 10.0
MAX_POD_PROBLEMS = 3
"""Pods described in a message; the rest are counted, not listed."""
RUNNER_SERVICES = "app.kubernetes.io/part-of=plnt,app.kubernetes.io/component=runner"
"""The label selector of the runner chart's Services."""
REVISION_LABEL = "plnt.work/revision"
WORKFLOWRUN_LABEL = "plnt.work/workflowrun"


class KubeDeployments:
    """Reads Deployments and their pods through one ``kubernetes.client.ApiClient``."""

    def __init__(self, *, api: client.ApiClient, request_timeout_s: float = REQUEST_TIMEOUT_S):
        self._apps = client.AppsV1Api(api)
        self._core = client.CoreV1Api(api)
        self._timeout = request_timeout_s

    async def get(self, *, namespace: str, name: str) -> DeploymentState | None:
        """The Deployment's state; None when it does not exist. See ``DeploymentReadiness``."""
        doing = f"reading Deployment {namespace}/{name}"
        body = await self._read(doing, self._apps.read_namespaced_deployment, name, namespace)
        if body is None:
            return None
        spec = body.get("spec") or {}
        status = body.get("status") or {}
        replicas = spec.get("replicas")
        desired = 1 if replicas is None else int(replicas)  # the API server's default
        ready = int(status.get("readyReplicas") or 0)
        problems: tuple[str, ...] = ()
        if ready < desired:  # pods only matter while something is missing
            selector = _selector(spec.get("selector") or {})
            if selector:
                pods = await self._read(
                    f"listing pods of {namespace}/{name}",
                    self._core.list_namespaced_pod,
                    namespace,
                    label_selector=selector,
                )
                problems = pod_problems((pods or {}).get("items") or [])
        return DeploymentState(
            generation=int((body.get("metadata") or {}).get("generation") or 0),
            observed_generation=int(status.get("observedGeneration") or 0),
            desired=desired,
            updated=int(status.get("updatedReplicas") or 0),
            ready=ready,
            progressing_reason=_stalled_reason(status.get("conditions") or []),
            pod_problems=problems,
        )

    async def services(self, *, namespace: str) -> list[ServiceState]:
        """The runner Services of ``namespace`` with their endpoints (two list calls)."""
        listed = await self._read(
            f"listing runner Services in {namespace}",
            self._core.list_namespaced_service,
            namespace,
            label_selector=RUNNER_SERVICES,
        )
        services = (listed or {}).get("items") or []
        if not services:
            return []
        endpoints = await self._read(
            f"listing Endpoints in {namespace}",
            self._core.list_namespaced_endpoints,
            namespace,
            label_selector=RUNNER_SERVICES,
        )
        addresses = {
            (item.get("metadata") or {}).get("name"): _addresses(item)
            for item in (endpoints or {}).get("items") or []
        }
        return [_service_state(body, namespace, addresses) for body in services]

    async def _read(
        self, doing: str, method: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> dict[str, Any] | None:
        """One GET as a dict (raw JSON: no model validation of what the server sends)."""
        call = functools.partial(
            method, *args, _preload_content=False, _request_timeout=self._timeout, **kwargs
        )
        try:
            response = await asyncio.to_thread(call)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(exc, doing=doing, kinds=INSTALLER_ERRORS) from None
        except TRANSPORT_ERRORS as exc:
            raise api_error(exc, doing=doing, kinds=INSTALLER_ERRORS) from None
        try:
            parsed = json.loads(response.data)
        except ValueError:
            raise api_error(
                OSError("unreadable response"), doing=doing, kinds=INSTALLER_ERRORS
            ) from None
        return parsed if isinstance(parsed, dict) else None


def _service_state(
    body: dict[str, Any], namespace: str, addresses: dict[Any, tuple[int, int]]
) -> ServiceState:
    meta = body.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    ports = (body.get("spec") or {}).get("ports") or [{}]
    ready, not_ready = addresses.get(meta.get("name"), (0, 0))
    return ServiceState(
        name=str(meta.get("name", "")),
        namespace=namespace,
        port=int(ports[0].get("port") or RUNNER_SERVICE_PORT),
        run_namespace=str(annotations.get(RUN_NAMESPACE) or ""),
        run_name=str((meta.get("labels") or {}).get(WORKFLOWRUN_LABEL) or ""),
        saga_id=str(annotations.get(SAGA_ID) or ""),
        revision=str((meta.get("labels") or {}).get(REVISION_LABEL) or ""),
        ready=ready,
        not_ready=not_ready,
    )


def _addresses(endpoints: dict[str, Any]) -> tuple[int, int]:
    """(ready, not ready) addresses of an Endpoints object, over all its subsets."""
    subsets = endpoints.get("subsets") or []
    ready = sum(len(s.get("addresses") or []) for s in subsets)
    return ready, sum(len(s.get("notReadyAddresses") or []) for s in subsets)


def _selector(selector: dict[str, Any]) -> str:
    """A label selector string from a Deployment's ``matchLabels`` (what the chart sets)."""
    labels = selector.get("matchLabels") or {}
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def _stalled_reason(conditions: list[dict[str, Any]]) -> str:
    for condition in conditions:
        if condition.get("type") == "Progressing" and condition.get("status") == "False":
            return str(condition.get("reason") or "")
    return ""


def pod_problems(pods: list[dict[str, Any]]) -> tuple[str, ...]:
    """One line per pod that is not running and why, at most ``MAX_POD_PROBLEMS``."""
    lines: list[str] = []
    for pod in pods:
        name = (pod.get("metadata") or {}).get("name", "?")
        reason = _pod_reason(pod.get("status") or {})
        if reason:
            lines.append(f"{name}: {reason}")
    if len(lines) > MAX_POD_PROBLEMS:
        extra = len(lines) - MAX_POD_PROBLEMS
        lines = [*lines[:MAX_POD_PROBLEMS], f"and {extra} more"]
    return tuple(lines)


def _pod_reason(status: dict[str, Any]) -> str:
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        waiting = state.get("waiting")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating"):
            return _reason_line(waiting)
        terminated = state.get("terminated")
        if terminated:
            return _reason_line(terminated)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return _reason_line(condition)
    return ""


def _reason_line(item: dict[str, Any]) -> str:
    reason = str(item.get("reason") or "Unknown")
    message = str(item.get("message") or "").strip()
    return f"{reason}: {message}" if message else reason
