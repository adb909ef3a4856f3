"""Errors of the Kubernetes backend, and the translation of client failures into them.

Both are ``BackendUnavailable`` so callers that only know the project hierarchy still
read them right; they are retryable because waiting may cure them.
"""

import json
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from plnt_common.errors import BackendUnavailable, PlntError
from plnt_common.errors import KubernetesUnavailable as SharedKubernetesUnavailable


class KubernetesUnavailable(SharedKubernetesUnavailable, BackendUnavailable):
    """The API server or Helm did not answer, or answered with a server-side error.

    The project's ``KubernetesUnavailable`` (what the shared PlntBackend reader raises),
    and a ``BackendUnavailable`` for callers that only know backend failures.
    """


class ReleaseBusy(BackendUnavailable):
    """A Helm operation on the release is in flight (maybe another replica's): try later."""

    retryable = True
    reason = "ReleaseBusy"


TRANSPORT_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)
"""What a blocking ``kubernetes`` client call raises when it fails."""


def api_error(exc: BaseException, *, doing: str) -> PlntError:
    """The project error for a failed client call; ``doing`` says what was attempted.

    Server-side errors, throttling and transport failures are retryable; refusals
    (forbidden, invalid, unauthorized) are not, since asking again changes nothing.
    """
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        message = _status_message(exc.body) if exc.body else str(exc.reason)
        if status == 0 or status == 429 or status >= 500:
            return KubernetesUnavailable(f"{doing}: {status} {message}")
        return BackendUnavailable(f"{doing}: the API refused ({status}): {message}")
    return KubernetesUnavailable(f"{doing}: the API did not answer: {exc!r}")


def _status_message(body: Any) -> str:
    try:
        return str(json.loads(body).get("message") or body)
    except (TypeError, ValueError, AttributeError):
        return str(body)
