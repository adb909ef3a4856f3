"""Sends a runner the runner contract's requests; ``plnt_smoke.contract`` judges the answers.

``check_served`` checks clauses 2-6 and 8 against a runner that listens at a URL (the smoke step
and ``plnt runner check URL``); ``check_drain`` checks clause 7 against a runner process the
caller started and can signal (``plnt runner check --run``). Neither starts or stops a
process itself.
"""

import asyncio
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from plnt_common.errors import PlntError
from plnt_smoke.contract import (
    DRAIN_LIMIT_S,
    Answer,
    Clause,
    ClauseResult,
    judge_drain,
    judge_errors,
    judge_healthz,
    judge_invoke,
    judge_metrics,
    judge_stream,
    judge_trace,
    not_checked,
)

NOT_OBJECTS = (("a JSON array", b"[1, 2]"), ("malformed JSON", b'{"unfinished": '))
"""Bodies clause 4 sends, each of which must get a 4xx."""
CONTRACT_INVOCATIONS = 2
"""Invocations with a JSON object that ``check_served`` sends: clause 3's and clause 5's."""
POLL_S = 0.1


class RunnerUnreachable(PlntError):
    """Nothing accepts connections at the runner's address."""

    reason = "RunnerUnreachable"


async def fetch(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    timeout_s: float,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    """The runner's answer; a transport failure is an ``Answer`` with status 0, never raised."""
    try:
        async with session.request(
            method,
            url,
            data=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as response:
            raw = await response.read()
            names = {name.lower(): value for name, value in response.headers.items()}
            return Answer(status=response.status, headers=names, body=raw)
    except TimeoutError:
        return Answer(status=0, problem=f"no answer within {timeout_s:g} s")
    except aiohttp.ClientError as exc:
        return Answer(status=0, problem=f"{type(exc).__name__}: {exc}")


async def wait_healthy(
    session: aiohttp.ClientSession,
    url: str,
    *,
    timeout_s: float,
    started: float,
    starting: bool,
    abort: Callable[[], None] | None = None,
) -> ClauseResult:
    """Clause 2: poll ``/healthz`` until it answers 200 or ``timeout_s`` since ``started``
    (a ``time.monotonic()``) passed.

    ``starting``: the runner may not listen yet, so a refused connection is polled again;
    otherwise the first refused connection raises ``RunnerUnreachable``. ``abort`` is called
    before each poll and may raise (a runner process that exited).
    """
    while True:
        if abort is not None:
            abort()
        answer = await fetch(session, "GET", f"{url}/healthz", timeout_s=min(timeout_s, 5.0))
        waited = time.monotonic() - started
        if answer.status == 0 and not starting:
            raise RunnerUnreachable(f"cannot reach the runner at {url}: {answer.problem}")
        if answer.status == 200 or waited >= timeout_s:
            return judge_healthz(answer, waited_s=waited)
        await asyncio.sleep(POLL_S)


async def check_served(
    session: aiohttp.ClientSession,
    url: str,
    *,
    payload: dict[str, Any],
    revision: str | None,
    timeout_s: float,
    started: float | None = None,
    starting: bool = False,
    abort: Callable[[], None] | None = None,
) -> list[ClauseResult]:
    """Clauses 2-6 and 8 against the runner at ``url``, in order. Clause 3's invocation
    carries a fresh ``traceparent``; clause 8 judges what its answer says of it.

    ``payload`` is the invoke body clauses 3 and 5 send; ``revision`` the
    ``PLNT_RUNNER_REVISION`` the runner must echo, None when unknown. ``timeout_s`` bounds
    the wait for ``/healthz`` and each request. Raises ``RunnerUnreachable`` as
    ``wait_healthy`` does.
    """
    healthz = await wait_healthy(
        session,
        url,
        timeout_s=timeout_s,
        started=time.monotonic() if started is None else started,
        starting=starting,
        abort=abort,
    )
    if not healthz.held:
        rest = (Clause.INVOKE, Clause.ERRORS, Clause.STREAM, Clause.METRICS, Clause.TRACE)
        return [healthz, *not_checked(rest, "/healthz never answered 200")]
    body = json.dumps(payload).encode()
    as_json = {"Content-Type": "application/json"}
    traceparent = f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"
    invoke = await fetch(
        session,
        "POST",
        f"{url}/invoke",
        timeout_s=timeout_s,
        body=body,
        headers={**as_json, "traceparent": traceparent},
    )
    errors = [
        (sent, await fetch(session, "POST", f"{url}/invoke", timeout_s=timeout_s, body=raw))
        for sent, raw in NOT_OBJECTS
    ]
    stream = await fetch(
        session,
        "POST",
        f"{url}/invoke",
        timeout_s=timeout_s,
        body=body,
        headers={**as_json, "Accept": "text/event-stream"},
    )
    metrics = await fetch(session, "GET", f"{url}/metrics", timeout_s=timeout_s)
    return [
        healthz,
        judge_invoke(invoke, revision=revision),
        judge_errors(errors),
        judge_stream(stream),
        judge_metrics(metrics),
        judge_trace(invoke, sent=traceparent),
    ]


async def check_drain(
    url: str,
    *,
    payload: dict[str, Any],
    terminate: Callable[[], None],
    wait_exit: Callable[[float], Awaitable[int | None]],
) -> ClauseResult:
    """Clause 7: SIGTERM while a call is in flight.

    The call is held in flight from the client side, whatever the workflow does: its
    headers and half its body go first, ``terminate`` sends SIGTERM, and the rest of the body
    follows. The runner must answer it and exit within ``DRAIN_LIMIT_S`` of the signal.
    ``wait_exit(seconds)`` returns the exit code, or None when the process still runs.
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    body = json.dumps(payload).encode()
    half = max(1, len(body) // 2)
    head = (
        f"POST /invoke HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(head + body[:half])
        await writer.drain()
        await asyncio.sleep(0.3)  # the runner has the call: it reads its body
        signalled = time.monotonic()
        terminate()
        await asyncio.sleep(0.3)
        call = await _finish_call(reader, writer, body[half:])
    finally:
        writer.close()
    left = max(0.0, DRAIN_LIMIT_S - (time.monotonic() - signalled))
    code = await wait_exit(left)
    return judge_drain(
        call=call,
        exit_code=code,
        exited_after_s=time.monotonic() - signalled,
        signal_number=signal.SIGTERM,
    )


async def _finish_call(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rest: bytes
) -> Answer:
    try:
        writer.write(rest)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), timeout=DRAIN_LIMIT_S)
    except (OSError, TimeoutError) as exc:
        return Answer(status=0, problem=f"{type(exc).__name__} {exc}".strip())
    status_line = raw.split(b"\r\n", 1)[0].decode("latin-1")
    fields = status_line.split()
    if len(fields) < 2 or not fields[1].isdigit():
        return Answer(status=0, problem="the connection closed without an answer")
    return Answer(status=int(fields[1]), body=raw.partition(b"\r\n\r\n")[2])
