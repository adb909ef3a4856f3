"""The watcher's door to the Kubernetes API: configuration and blocking calls.

``connect`` resolves the client configuration the standard way; ``call`` runs one
blocking ``kubernetes`` client call on a worker thread and translates its failures into
the project's errors (``plnt_common.kube_errors``, shared with the puller and the
installer). It is not a source or an elector: those build on it.
"""

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from plnt_common.errors import KubernetesUnavailable as KubernetesUnavailable  # re-exported
from plnt_common.errors import PlntError
from plnt_common.kube import GROUP as GROUP
from plnt_common.kube import VERSION as VERSION
from plnt_common.kube import api_client
from plnt_common.kube_errors import TRANSPORT_ERRORS, ErrorKinds, api_error
from plnt_common.kube_errors import Gone as Gone
from plnt_common.kube_errors import KubernetesRejected as KubernetesRejected

RUNS = "workflowruns"
KIND = "WorkflowRun"
MERGE_PATCH = "application/merge-patch+json"
MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"
"""metav1.MicroTime, the format of Lease and Event times."""
WATCHER_ERRORS = ErrorKinds(refused=KubernetesRejected, gone=Gone)
"""The watcher lists and watches again on ``Gone`` and stops on ``KubernetesRejected``."""


def connect(*, kubeconfig: str, context: str, user_agent: str) -> Any:
    """A ``kubernetes.client.ApiClient``; raises ``KubernetesUnavailable`` without config.

    An explicit ``kubeconfig`` wins; otherwise the KUBECONFIG variable or ~/.kube/config,
    and when neither exists the in-cluster service account, like kubectl and client-go
    (``plnt_common.kube.api_client``, shared with the puller and the installer).
    """
    return api_client(kubeconfig=kubeconfig, context=context, user_agent=user_agent)


def translate(exc: BaseException) -> PlntError:
    """The project error for a failed client call of the watcher."""
    return api_error(exc, kinds=WATCHER_ERRORS)


THROTTLED_ATTEMPTS = 10
"""A call the server answers 429 is sent again after its Retry-After this often, as
client-go does; then the 429 is raised as ``KubernetesUnavailable``."""
DEFAULT_RETRY_AFTER_S = 1.0


async def call(function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Run one bounded client call on a worker thread; raises only ``PlntError``s.

    A 429 is honoured: the call waits the answer's ``Retry-After`` before it is sent again.
    """
    for attempt in range(THROTTLED_ATTEMPTS):
        try:
            return await asyncio.to_thread(functools.partial(function, *args, **kwargs))
        except TRANSPORT_ERRORS as exc:
            wait = retry_after(exc)
            if wait is None or attempt == THROTTLED_ATTEMPTS - 1:
                raise translate(exc) from None
            await asyncio.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def retry_after(exc: BaseException) -> float | None:
    """Seconds a 429 asks the client to wait (its Retry-After), or None for another error."""
    if getattr(exc, "status", None) != 429:
        return None
    headers = getattr(exc, "headers", None) or {}
    try:
        return max(0.0, float(headers.get("Retry-After", DEFAULT_RETRY_AFTER_S)))
    except (TypeError, ValueError):
        return DEFAULT_RETRY_AFTER_S
