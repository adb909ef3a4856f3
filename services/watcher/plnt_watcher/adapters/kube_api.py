"""The watcher's door to the Kubernetes API: configuration, blocking calls, error translation.

``connect`` resolves the client configuration the standard way; ``call`` runs one
blocking ``kubernetes`` client call on a worker thread and translates its failures into
the project's errors. It is not a source or an elector: those build on it.
"""

import asyncio
import functools
import json
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client

from plnt_common.errors import Conflict, PlntError, ResourceNotFound
from plnt_common.errors import KubernetesUnavailable as KubernetesUnavailable  # re-exported
from plnt_common.kube import api_client

GROUP = "plnt.work"
VERSION = "v1"
RUNS = "workflowruns"
KIND = "WorkflowRun"
MERGE_PATCH = "application/merge-patch+json"
MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"
"""metav1.MicroTime, the format of Lease and Event times."""


class KubernetesRejected(PlntError):
    """The API server refused the request (bad request, forbidden, invalid): do not retry."""

    reason = "KubernetesRejected"


class Gone(PlntError):
    """A watch position is older than the server's history (410): list again."""

    reason = "Gone"


def connect(*, kubeconfig: str, context: str, user_agent: str) -> Any:
    """A ``kubernetes.client.ApiClient``; raises ``KubernetesUnavailable`` without config.

    An explicit ``kubeconfig`` wins; otherwise the KUBECONFIG variable or ~/.kube/config,
    and when neither exists the in-cluster service account, like kubectl and client-go
    (``plnt_common.kube.api_client``, shared with the puller and the installer).
    """
    return api_client(kubeconfig=kubeconfig, context=context, user_agent=user_agent)


def status_message(body: Any) -> str:
    """The message of a ``metav1.Status`` body, or the body itself."""
    try:
        return str(json.loads(body).get("message") or body)
    except (TypeError, ValueError, AttributeError):
        return str(body)


def translate(exc: BaseException) -> PlntError:
    """The project error for a failed client call."""
    if isinstance(exc, client.ApiException):
        message = status_message(exc.body) if exc.body else str(exc.reason)
        status = exc.status or 0
        if status == 404:
            return ResourceNotFound(message)
        if status == 409:
            return Conflict(message)
        if status == 410:
            return Gone(message)
        if status == 429 or status >= 500 or status == 0:
            return KubernetesUnavailable(f"{status}: {message}")
        return KubernetesRejected(f"{status}: {message}")
    return KubernetesUnavailable(f"the Kubernetes API did not answer: {exc!r}")


async def call(function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Run one bounded client call on a worker thread; raises only ``PlntError``s."""
    try:
        return await asyncio.to_thread(functools.partial(function, *args, **kwargs))
    except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise translate(exc) from None
