"""The one translation of failed Kubernetes API client calls into the project's errors.

Transport failures, throttling and server-side errors are "unavailable" (retryable:
waiting may cure them); refusals such as forbidden, unauthorized or invalid are "refused",
since asking again changes nothing. Which project class each outcome becomes depends on
the boundary (``ErrorKinds``); the classification and the wording are the same everywhere.
"""

import json
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from plnt_common.errors import (
    BackendUnavailable,
    Conflict,
    KubernetesUnavailable,
    PlntError,
    ResourceNotFound,
)

TRANSPORT_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)
"""What a blocking ``kubernetes`` client call raises when it fails."""


class KubernetesRejected(PlntError):
    """The API server refused the request (bad request, forbidden, invalid): do not retry."""

    reason = "KubernetesRejected"


class Gone(PlntError):
    """A watch position is older than the server's history (410): list again."""

    reason = "Gone"


@dataclass(frozen=True)
class ErrorKinds:
    """The project error each outcome of a failed call becomes at one boundary."""

    unavailable: type[PlntError] = KubernetesUnavailable
    refused: type[PlntError] = BackendUnavailable
    gone: type[PlntError] | None = None
    """410 for a watch position; None where 410 is an expired list continuation, which
    listing again from the start cures (so: unavailable)."""
    forbidden_hint: str = ""
    """Appended to a 403: the permission the service account lacks."""


def status_message(body: Any) -> str:
    """The message of a ``metav1.Status`` body, or the body itself."""
    try:
        return str(json.loads(body).get("message") or body)
    except (TypeError, ValueError, AttributeError):
        return str(body)


def api_error(
    exc: BaseException, *, doing: str = "", kinds: ErrorKinds = ErrorKinds()
) -> PlntError:
    """The project error for a failed client call; ``doing`` says what was attempted.

    404 and 409 become ``ResourceNotFound`` and ``Conflict`` for callers that act on them.
    """
    prefix = f"{doing}: " if doing else ""
    if not isinstance(exc, ApiException):
        return kinds.unavailable(f"{prefix}the Kubernetes API did not answer: {exc!r}")
    status = int(exc.status or 0)
    message = status_message(exc.body) if exc.body else str(exc.reason)
    if status == 404:
        return ResourceNotFound(f"{prefix}{message}")
    if status == 409:
        return Conflict(f"{prefix}{message}")
    if status == 410 and kinds.gone is not None:
        return kinds.gone(f"{prefix}{message}")
    if status in (0, 410, 429) or status >= 500:
        return kinds.unavailable(f"{prefix}the Kubernetes API answered {status}: {message}")
    hint = f" ({kinds.forbidden_hint})" if status == 403 and kinds.forbidden_hint else ""
    return kinds.refused(f"{prefix}the Kubernetes API refused ({status}): {message}{hint}")
