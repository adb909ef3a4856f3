"""Calls a canary's ``POST /invoke`` with bounded concurrency over one pooled session, and
checks it against the runner contract first."""

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import aiohttp

from plnt_smoke.adapters.contract import RunnerUnreachable, check_served
from plnt_smoke.contract import SERVED_CLAUSES, ClauseResult, missed, not_checked
from plnt_smoke.golden import GoldenAnswer, reply_text
from plnt_smoke.logic import Sample


class SmokeHarness:
    def __init__(self, *, request_timeout_s: float) -> None:
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "SmokeHarness":
        self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def contract(
        self, *, url: str, payload: dict[str, Any], revision: str
    ) -> list[ClauseResult]:
        """Clauses 2-6 of the runner contract against the canary; a canary that cannot be
        reached misses clause 2 (never raised)."""
        assert self._session is not None, "use SmokeHarness as an async context manager"
        try:
            return await check_served(
                self._session,
                url,
                payload=payload,
                revision=revision,
                timeout_s=self._timeout.total or 30.0,
            )
        except RunnerUnreachable as exc:
            healthz, *rest = SERVED_CLAUSES
            return [missed(healthz, str(exc)), *not_checked(rest, "unreachable")]

    async def invoke_many(
        self, *, url: str, payload: dict[str, Any], invocations: int, slots: asyncio.Semaphore
    ) -> list[Sample]:
        """Every invocation's sample, at most ``slots`` in flight; errors are samples too,
        never exceptions."""
        calls = [self._call(url, payload, slots, keep_body=False) for _ in range(invocations)]
        return [sample for sample, _ in await asyncio.gather(*calls)]

    async def answers(
        self, *, url: str, payloads: Sequence[dict[str, Any]], slots: asyncio.Semaphore
    ) -> list[GoldenAnswer]:
        """The reply text to each payload, in order, at most ``slots`` in flight; a failed
        call is an answer without text."""
        calls = await asyncio.gather(
            *(self._call(url, payload, slots, keep_body=True) for payload in payloads)
        )
        return [_answer(sample, body) for sample, body in calls]

    async def _call(
        self, url: str, payload: dict[str, Any], slots: asyncio.Semaphore, *, keep_body: bool
    ) -> tuple[Sample, bytes]:
        assert self._session is not None, "use SmokeHarness as an async context manager"
        async with slots:
            started = time.perf_counter()
            try:
                async with self._session.post(f"{url}/invoke", json=payload) as response:
                    body = await response.read()
                    elapsed = (time.perf_counter() - started) * 1000
                    if response.status >= 300:
                        detail = body[:200].decode(errors="replace")
                        error = f"HTTP {response.status}: {detail}"
                        return Sample(elapsed, ok=False, error=error), b""
                    return Sample(elapsed, ok=True), body if keep_body else b""
            except (aiohttp.ClientError, TimeoutError) as exc:
                elapsed = (time.perf_counter() - started) * 1000
                return Sample(elapsed, ok=False, error=f"{type(exc).__name__}: {exc}"), b""


def _answer(sample: Sample, body: bytes) -> GoldenAnswer:
    if not sample.ok:
        return GoldenAnswer(text=None, error=sample.error)
    try:
        decoded = json.loads(body)
    except ValueError:
        return GoldenAnswer(text=None, error="the canary's answer is not JSON")
    text = reply_text(decoded)
    if text is None:
        return GoldenAnswer(text=None, error="the canary's answer has no output")
    return GoldenAnswer(text=text)
