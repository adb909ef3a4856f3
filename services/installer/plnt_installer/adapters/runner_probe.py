"""Asks a runner at its address whether it serves: ``GET <url>/healthz``.

The Helm observer's last word on a release whose cluster API has gone silent: the API
cannot say whether its pods still run, the runner itself can.
"""

import aiohttp

RUNNER_HEALTH_PATH = "/healthz"
"""The runner's health route (DESIGN's runner contract, clause 2): 200 once it can serve."""
PROBE_TIMEOUT_S = 2.0


class HttpRunnerProbe:
    """``RunnerProbe`` over HTTP."""

    def __init__(self, *, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def problem(self, url: str) -> str:
        """Why the runner at ``url`` does not serve; "" when its health route answers 200."""
        target = url.rstrip("/") + RUNNER_HEALTH_PATH
        try:
            async with (
                aiohttp.ClientSession(timeout=self._timeout) as session,
                session.get(target) as response,
            ):
                if response.status == 200:
                    return ""
                return f"GET {target} answered {response.status}"
        except TimeoutError:
            return f"GET {target} did not answer within {self._timeout.total:g}s"
        except (aiohttp.ClientError, ValueError) as exc:
            return f"GET {target} failed: {exc or type(exc).__name__}"
