"""Errors of the installer's Kubernetes backend, and how its failed API calls translate.

Both are ``BackendUnavailable`` so callers that only know the project hierarchy still
read them right; they are retryable because waiting may cure them. The translation itself
is the shared one (``plnt_common.kube_errors``).
"""

from plnt_common.errors import BackendUnavailable
from plnt_common.errors import KubernetesUnavailable as SharedKubernetesUnavailable
from plnt_common.kube_errors import ErrorKinds


class KubernetesUnavailable(SharedKubernetesUnavailable, BackendUnavailable):
    """The API server or Helm did not answer, or answered with a server-side error.

    The project's ``KubernetesUnavailable`` (what the shared PlntBackend reader raises),
    and a ``BackendUnavailable`` for callers that only know backend failures.
    """


class ReleaseBusy(BackendUnavailable):
    """A Helm operation on the release is in flight (maybe another replica's): try later."""

    retryable = True
    reason = "ReleaseBusy"


INSTALLER_ERRORS = ErrorKinds(unavailable=KubernetesUnavailable)
"""Failed reads of Deployments, Services and Secrets: refusals are ``BackendUnavailable``."""
