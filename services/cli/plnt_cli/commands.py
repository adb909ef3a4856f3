"""The CLI's commands that talk to a running stack over the bus and the router."""

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import aiohttp
from nats.js.errors import KeyDeletedError, KeyNotFoundError

from plnt_cli import capacity_view, render
from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_dead_letters, read_events
from plnt_common.bus.replay import ReplayStats
from plnt_common.bus.replay import replay as replay_bus
from plnt_common.errors import PlntError, ResourceNotFound, SpecInvalid
from plnt_common.projection import RunProjection, run_key
from plnt_common.resource_store import PLURALS, ResourceStore
from plnt_common.resources import Resource
from plnt_common.status import TERMINAL_PHASES, Phase

KIND_ALIASES = {
    "workflowrun": "WorkflowRun",
    "workflowruns": "WorkflowRun",
    "wr": "WorkflowRun",
    "backend": "PlntBackend",
    "backends": "PlntBackend",
    "plntbackend": "PlntBackend",
    "plntbackends": "PlntBackend",
}


def resolve_kind(word: str) -> str:
    kind = KIND_ALIASES.get(word.lower())
    if kind is None:
        raise SpecInvalid(f"unknown resource type {word!r} (use workflowruns or backends)")
    return kind


def namespace_of(kind: str, namespace: str) -> str | None:
    return namespace if kind == "WorkflowRun" else None


@dataclass
class Session:
    """One connection to the stack for the length of a command."""

    bus: Bus
    store: ResourceStore

    @classmethod
    async def open(cls, nats_url: str) -> "Session":
        bus = await Bus.open(nats_url, service="cli")
        return cls(bus=bus, store=ResourceStore(bus))

    async def close(self) -> None:
        await self.bus.close()


# What a resource leaves of the bus's message limit: its status and the saga events that
# carry its spec (spec.pulled adds the backend) must fit in one message each.
ROOM_FOR_STATUS_AND_EVENTS = 64 * 1024


async def apply(session: Session, resources: list[Resource]) -> list[str]:
    """Apply resources already read and validated (``documents``); one line per resource."""
    for resource in resources:
        check_fits_the_bus(resource, max_payload=session.bus.nc.max_payload)
    lines = []
    for resource in resources:
        _, outcome = await session.store.apply(resource)
        lines.append(f"{resource.kind.lower()}.plnt.work/{resource.metadata.name} {outcome}")
    return lines


def check_fits_the_bus(resource: Resource, *, max_payload: int) -> None:
    """Refuse at once what the bus would refuse only after its publish retries."""
    limit = max_payload - ROOM_FOR_STATUS_AND_EVENTS
    size = len(resource.model_dump_json(by_alias=True, exclude_none=True))
    if size > limit:
        raise SpecInvalid(
            f"{resource.kind} {resource.metadata.name!r} is {size:,} bytes; a resource must "
            f"stay under {limit:,} (the bus's message limit of {max_payload:,} bytes, "
            "less room for its status and saga events)"
        )


async def get(
    session: Session, *, kind_word: str, name: str | None, namespace: str, output: str | None
) -> str:
    kind = resolve_kind(kind_word)
    ns = namespace_of(kind, namespace)
    if name:
        stored = await session.store.get(kind, ns, name)
        if stored is None:
            raise ResourceNotFound(
                f"{PLURALS[kind]} {name!r} not found" + (f" in namespace {ns!r}" if ns else "")
            )
        bodies = [stored.body]
    else:
        bodies = [o.body for o in await session.store.list(kind, ns)]
    if kind == "PlntBackend":
        bodies = capacity_view.with_capacity(bodies, await capacity_view.observed(session.bus))
    if output:
        return render.as_document(bodies[0], output) if name else render.as_list(bodies, output)
    if not bodies:
        return f"No {PLURALS[kind]} found" + (f" in namespace {ns}." if ns else ".")
    return render.workflowrun_rows(bodies) if kind == "WorkflowRun" else render.backend_rows(bodies)


async def delete(
    session: Session, *, kind_word: str, name: str, namespace: str, wait_s: float, say: Any
) -> None:
    kind = resolve_kind(kind_word)
    ns = namespace_of(kind, namespace)
    outcome = await session.store.delete(kind, ns, name)
    kind_label = f"{kind.lower()}.plnt.work/{name}"
    if outcome == "deleted" or wait_s <= 0:
        say(f"{kind_label} {'deleted' if outcome == 'deleted' else 'deletion requested'}")
        return
    say(f"{kind_label} deletion requested; removing routes and releases…")
    await wait_until_gone(session, kind=kind, namespace=ns, name=name, timeout_s=wait_s)
    say(f"{kind_label} deleted")


async def wait_until_gone(
    session: Session, *, kind: str, namespace: str | None, name: str, timeout_s: float
) -> bool:
    """Return once the object is gone: True if it was there when the wait began."""

    async def gone() -> bool:
        was_there = False
        async for stored in session.store.watch_object(kind, namespace, name):
            if stored is None:
                return was_there
            was_there = True
        return was_there

    try:
        return await asyncio.wait_for(gone(), timeout=timeout_s)
    except TimeoutError:
        raise PlntError(f"{name} still exists after {timeout_s:g}s") from None


def parse_condition(text: str) -> tuple[str, str]:
    """``phase=<a known Phase>`` or ``delete``."""
    if text == "delete":
        return "delete", ""
    key, sep, value = text.partition("=")
    if not sep or key != "phase" or not value:
        raise SpecInvalid(f"--for {text!r}: use phase=<Phase> or delete")
    phases = [phase.value for phase in Phase]
    if value not in phases:
        raise SpecInvalid(f"--for {text!r}: unknown phase; the phases are {', '.join(phases)}")
    return key, value


def parse_duration(text: str) -> float:
    """``60s``, ``2m``, ``1h`` or a number of seconds: finite and not negative."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, scale = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    try:
        seconds = float(number) * scale
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise SpecInvalid(f"--timeout {text!r}: use a duration like 60s, 2m or 90")
    return seconds


async def wait_for_phase(
    session: Session, *, name: str, namespace: str, phase: str, timeout_s: float, say: Any
) -> dict[str, Any]:
    """Wait until the run's phase is ``phase`` for its current generation.

    Fails at once when the run settles in another final phase for that generation, or
    is not there, or is deleted meanwhile.
    """
    last_phase = ""

    async def watch() -> dict[str, Any]:
        nonlocal last_phase
        async for stored in session.store.watch_object("WorkflowRun", namespace, name):
            if stored is None:
                raise ResourceNotFound(
                    f"workflowruns {name!r} was deleted while waiting for {phase}"
                    if last_phase
                    else f"workflowruns {name!r} not found in namespace {namespace!r}"
                )
            status = stored.body.get("status") or {}
            current = status.get("phase", "Pending")
            current_generation = (
                status.get("observedGeneration", 0) == stored.body["metadata"]["generation"]
            )
            if current != last_phase:
                say(
                    f"{name}: {current}"
                    + (f" ({status['message']})" if status.get("message") else "")
                )
                last_phase = current
            if current == phase and current_generation:
                return stored.body
            if current_generation and current in {p.value for p in TERMINAL_PHASES}:
                raise PlntError(f"{name} ended {current}, not {phase}: {status.get('message', '')}")
        raise ResourceNotFound(f"workflowruns {name!r} disappeared")

    try:
        return await asyncio.wait_for(watch(), timeout=timeout_s)
    except TimeoutError:
        raise PlntError(
            f"timed out after {timeout_s:g}s waiting for {name} to be {phase} "
            f"(last phase: {last_phase or 'unknown'})"
        ) from None


async def history(session: Session, *, name: str, namespace: str) -> str:
    rows = []
    first: float | None = None
    previous: dict[str, float] = {}
    async for stored in read_events(
        session.bus.nc, filter_subject=subjects.run_filter(namespace, name)
    ):
        event = stored.event
        if event is None:
            rows.append([str(stored.sequence), "-", "-", "-", "-", "(undecodable)", stored.problem])
            continue
        at = event.time.timestamp()
        first = at if first is None else first
        step = at - previous.get(event.sagaid, at)
        previous[event.sagaid] = at
        rows.append(
            [
                str(stored.sequence),
                event.time.strftime("%H:%M:%S.%f")[:-3],
                f"+{at - first:.3f}s",
                f"{step * 1000:.0f} ms",
                event.sagaid,
                event.event_type.value,
                _detail(event.data),
            ]
        )
    if not rows:
        raise ResourceNotFound(f"no events for {namespace}/{name} in the stream")
    timeline = render.table(["SEQ", "TIME", "SINCE START", "STEP", "SAGA", "EVENT", "DETAIL"], rows)
    trace_id = await _saga_trace(session.bus, namespace=namespace, name=name)
    if trace_id:
        timeline = f"{timeline}\ntrace {trace_id}"
    dead = await read_dead_letters(session.bus.js, namespace=namespace, name=name)
    if not dead:
        return timeline
    dead_rows = [
        [
            str(letter.sequence),
            letter.consumer,
            str(letter.deliveries),
            letter.event.event_type.value if letter.event else "(undecodable)",
            letter.event.sagaid if letter.event else "-",
        ]
        for letter in dead
    ]
    table = render.table(["SEQ", "GIVEN UP BY", "DELIVERIES", "EVENT", "SAGA"], dead_rows)
    return f"{timeline}\n\nDead letters (events a service gave up on):\n{table}"


async def _saga_trace(bus: Bus, *, namespace: str, name: str) -> str:
    """The trace of the run's current saga (``status.traceId`` in ``plnt-runs``); ""
    when it has none (tracing off) or the run has no projection."""
    try:
        entry = await bus.runs.get(run_key(namespace, name))
    except (KeyNotFoundError, KeyDeletedError):
        return ""
    if not entry.value:
        return ""
    return RunProjection.model_validate_json(entry.value).status.trace_id or ""


def _detail(data: dict[str, Any]) -> str:
    for key in ("message", "revision"):
        if data.get(key):
            return str(data[key])[:80]
    if "figures" in data:
        return str(data["figures"].get("reason", ""))[:80]
    if "canary" in data:
        return _canary_detail(data["canary"], backend=str(data.get("backend") or ""))
    if "spec_digest" in data:
        return str(data["spec_digest"])[:23] + "…"
    return ""


def _canary_detail(canary: dict[str, Any], *, backend: str) -> str:
    """The address of the copy an event acts on: a walk's later backend has its own,
    listed in the canary's ``spread``."""
    url = str(canary.get("url", ""))
    for copy in canary.get("spread") or ():
        if copy.get("backend") == backend:
            url = str(copy.get("url", ""))
    return f"{url} on {backend}" if backend else url


async def replay(session: Session) -> ReplayStats:
    """Rebuild ``plnt-runs`` from the stream alone, the same fold the watcher applies."""
    return await replay_bus(session.bus)


@dataclass(frozen=True)
class Invoked:
    """The router's answer to ``plnt invoke``."""

    status: int
    revision: str
    text: str
    traceparent: str
    """The router span's W3C ``traceparent``; empty when the router records no traces."""

    @property
    def trace_id(self) -> str:
        """The trace id in ``traceparent``, or ``""`` when it holds none."""
        parts = self.traceparent.strip().split("-")
        if len(parts) != 4 or len(parts[1]) != 32 or parts[1] == "0" * 32:
            return ""
        return parts[1] if all(c in "0123456789abcdef" for c in parts[1]) else ""


async def invoke(
    session: Session, *, name: str, namespace: str, body: Any, stream: bool
) -> Invoked:
    """POST ``body`` as JSON to the run's endpoint; returns the router's answer."""
    stored = await session.store.get("WorkflowRun", namespace, name)
    if stored is None:
        raise ResourceNotFound(f"workflowruns {name!r} not found in namespace {namespace!r}")
    endpoint = (stored.body.get("status") or {}).get("endpoint")
    if not endpoint:
        phase = (stored.body.get("status") or {}).get("phase", "Pending")
        raise PlntError(
            f"{name} has no endpoint yet (phase {phase}); "
            f"try `plnt wait workflowrun {name} --for phase=Ready`"
        )
    headers = {"Accept": "text/event-stream"} if stream else {}
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.post(endpoint, json=body, headers=headers) as response,
        ):
            return Invoked(
                status=response.status,
                revision=response.headers.get("x-plnt-revision", ""),
                text=await response.text(),
                traceparent=response.headers.get("traceparent", ""),
            )
    except aiohttp.ClientError as exc:
        raise PlntError(f"cannot reach the router at {endpoint}: {exc}") from None
