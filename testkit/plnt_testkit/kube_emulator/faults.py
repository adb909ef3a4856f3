"""Faults the emulator answers instead of serving: an API server refusing requests.

A ``Fault`` matches requests by method and path suffix (a ``/status`` suffix stands for
status writes, ``workflowruns/<name>/status`` for one object's) and answers them with a
Status of ``code`` until ``until`` (a monotonic time) or for ``times`` requests, with a
``Retry-After`` header when given, as a real server's 429 and 503 carry one.
"""

import time
from dataclasses import dataclass
from typing import Any

REASONS = {
    409: "Conflict",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass
class Fault:
    methods: tuple[str, ...]
    path_suffix: str
    code: int
    until: float | None = None
    times: int | None = None
    retry_after_s: int | None = None

    def active(self) -> bool:
        if self.until is not None and time.monotonic() >= self.until:
            return False
        return self.times is None or self.times > 0

    def wants(self, method: str, path: str) -> bool:
        if not self.active() or method not in self.methods:
            return False
        if not path.endswith(self.path_suffix):
            return False
        if self.times is not None:
            self.times -= 1
        return True

    def status(self) -> dict[str, Any]:
        reason = REASONS.get(self.code, "InternalError")
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"injected fault: {reason}",
            "reason": reason,
            "code": self.code,
        }
