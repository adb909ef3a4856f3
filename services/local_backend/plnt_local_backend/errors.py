"""Errors of the local backend that the shared hierarchy does not name."""

from plnt_common.errors import PlntError


class RunnerConfigInvalid(PlntError):
    """A release cannot launch as configured (e.g. its LLM API key variable is unset).

    Restarting will not help; the release is reported Failed with this message.
    """

    reason = "RunnerConfigInvalid"
