"""Errors the router's upstream adapter raises, in the project's hierarchy.

They carry what the HTTP layer needs to pick 502 or 504 and whether one retry on another
runner is safe. They are not HTTP responses; ``handlers`` turns them into those.
"""

from plnt_common.errors import PlntError


class UpstreamTimeout(PlntError):
    """The runner took longer than ``upstream_timeout_s`` (answered by 504)."""

    retryable = True
    reason = "UpstreamTimeout"


class UpstreamUnavailable(PlntError):
    """The runner refused, reset or dropped the connection (answered by 502).

    ``before_send`` is true when no byte of the request reached the runner (connection
    refused), so trying another runner cannot execute the workflow twice.
    """

    retryable = True
    reason = "UpstreamUnavailable"

    def __init__(self, message: str, *, before_send: bool) -> None:
        super().__init__(message)
        self.before_send = before_send
