"""Errors the router's upstream adapter raises, in the project's hierarchy.

They carry what the HTTP layer needs to pick 502 or 504 and whether one retry on another
runner is safe. They are not HTTP responses; ``handlers`` turns them into those.
"""

from plnt_common.errors import PlntError


class UpstreamTimeout(PlntError):
    """The runner took longer than ``upstream_timeout_s`` (answered by 504).

    ``before_send`` is true when it was the connection that took too long (nothing sent).
    """

    retryable = True
    reason = "UpstreamTimeout"

    def __init__(self, message: str, *, before_send: bool = False) -> None:
        super().__init__(message)
        self.before_send = before_send


class UpstreamUnavailable(PlntError):
    """The runner refused, reset or dropped the connection (answered by 502).

    ``before_send`` is true when no byte of the request reached the runner (connection
    refused), so trying another runner cannot execute the workflow twice. ``before_answer``
    is true when the request went out but the connection broke before the answer's status
    line: the runner said nothing (it usually died with the call).
    """

    retryable = True
    reason = "UpstreamUnavailable"

    def __init__(self, message: str, *, before_send: bool, before_answer: bool = False) -> None:
        super().__init__(message)
        self.before_send = before_send
        self.before_answer = before_send or before_answer
