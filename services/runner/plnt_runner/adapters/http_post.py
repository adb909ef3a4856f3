"""``HttpPoster`` over aiohttp: one JSON POST per ``http.request`` step.

Sends the payload, returns the body (parsed JSON when the server says it is JSON), and
turns every non-2xx answer, timeout and connection error into ``HttpStepFailed``. It does
not retry: a POST may have side effects. (A shadow call never reaches it: the executor
answers ``http.request``'s dry run there; the shadow header is added all the same, so no
call made for a shadow invocation goes out without it.)
"""

import json
from typing import Any

import aiohttp

from plnt_runner.errors import HttpStepFailed
from plnt_runner.shadow import outbound_headers

_ERROR_SNIPPET = 300


class AiohttpPoster:
    """POSTs over a shared ``aiohttp.ClientSession`` owned (and closed) by the caller."""

    def __init__(self, *, session: aiohttp.ClientSession, timeout_s: float) -> None:
        self._session = session
        self._timeout_s = timeout_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def post_json(self, *, url: str, payload: Any) -> Any:
        """The response body: JSON-decoded when its content type is JSON, else the text."""
        try:
            async with self._session.post(
                url, json=payload, headers=outbound_headers(), timeout=self._timeout
            ) as response:
                text = await response.text(errors="replace")
                if not 200 <= response.status < 300:
                    detail = text[:_ERROR_SNIPPET].strip()
                    raise HttpStepFailed(
                        f"POST {url} answered {response.status}" + (f": {detail}" if detail else "")
                    )
                is_json = response.content_type in ("application/json",) or (
                    response.content_type.endswith("+json")
                )
        except TimeoutError:
            raise HttpStepFailed(f"POST {url} timed out after {self._timeout_s:g}s") from None
        except aiohttp.ClientError as exc:
            raise HttpStepFailed(f"POST {url} failed: {type(exc).__name__}: {exc}") from None
        if is_json and text:
            try:
                return json.loads(text)
            except ValueError:
                return text  # a server mislabelling text as JSON still answered
        return text
