"""The one translation of Kubernetes client failures: the same classification at every
boundary, each boundary's own error classes."""

import pytest
from kubernetes.client.exceptions import ApiException

from plnt_common.errors import (
    BackendUnavailable,
    Conflict,
    KubernetesUnavailable,
    PlntError,
    ResourceNotFound,
)
from plnt_common.kube_errors import ErrorKinds, Gone, KubernetesRejected, api_error
from plnt_installer.adapters.kube_errors import INSTALLER_ERRORS
from plnt_installer.adapters.kube_errors import KubernetesUnavailable as InstallerUnavailable
from plnt_watcher.adapters.kube_api import WATCHER_ERRORS

STATUS = '{"kind": "Status", "message": "said the server"}'


@pytest.mark.parametrize(
    ("kinds", "status", "expected"),
    [
        (WATCHER_ERRORS, 410, Gone),
        (WATCHER_ERRORS, 403, KubernetesRejected),
        (WATCHER_ERRORS, 503, KubernetesUnavailable),
        (WATCHER_ERRORS, 404, ResourceNotFound),
        (WATCHER_ERRORS, 409, Conflict),
        (INSTALLER_ERRORS, 503, InstallerUnavailable),
        (INSTALLER_ERRORS, 410, InstallerUnavailable),
        (INSTALLER_ERRORS, 422, BackendUnavailable),
        (ErrorKinds(), 429, KubernetesUnavailable),
    ],
)
def test_each_boundary_gets_its_own_class_for_the_same_outcome(
    kinds: ErrorKinds, status: int, expected: type[PlntError]
) -> None:
    translated = api_error(ApiException(status=status, reason="r", body=STATUS), kinds=kinds)
    assert type(translated) is expected
    assert "said the server" in str(translated)


def test_the_installers_unavailability_is_also_a_backend_failure() -> None:
    translated = api_error(OSError("reset"), doing="reading Deployment a/b", kinds=INSTALLER_ERRORS)
    assert isinstance(translated, BackendUnavailable) and translated.retryable
    assert str(translated) == "reading Deployment a/b: the Kubernetes API did not answer: " + (
        "OSError('reset')"
    )


def test_the_forbidden_hint_goes_only_on_a_403() -> None:
    kinds = ErrorKinds(forbidden_hint="grant list")
    assert str(api_error(ApiException(status=403, reason="Forbidden"), kinds=kinds)).endswith(
        "refused (403): Forbidden (grant list)"
    )
    assert "grant list" not in str(api_error(ApiException(status=401, reason="No"), kinds=kinds))
    assert str(api_error(ApiException(status=403, reason="Forbidden"))).endswith("(403): Forbidden")
