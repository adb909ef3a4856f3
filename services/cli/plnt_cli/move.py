"""``plnt move NAME --to BACKEND``: run a WorkflowRun's runner on another PlntBackend, the new
one Ready before the old is retired.

A move is a rollout: the CLI edits the run's spec as ``kubectl patch`` would
(``spec.backend.cluster`` becomes BACKEND; in ``spec.placement.backends`` BACKEND moves
first, the rest keep their order as fallbacks), and the generation it bumps starts the
usual saga. The same revision is installed on BACKEND as the canary, smoke-tested, walked
through the run's canary steps and promoted; only then is the release on the old backend
retired (kept for ``rollback.keepPreviousFor`` when set). A move that fails rolls back like
any canary: the old backend keeps serving.

Refused in one line, with nothing changed: an unknown backend, a run mid-rollout, a run
placed by ``selector``, a run already serving there.
"""

import asyncio
import copy
from collections.abc import Callable
from typing import Any

from plnt_cli.commands import Session
from plnt_common.errors import PlntError, ResourceNotFound
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import WorkflowRun, parse_resource
from plnt_common.status import TERMINAL_PHASES, Phase

KIND = "WorkflowRun"
WAIT_S = 600.0
SETTLED = TERMINAL_PHASES
"""Phases a run may be moved from: no saga of it is deciding anything."""


async def move(
    session: Session,
    *,
    name: str,
    namespace: str,
    to: str,
    say: Callable[[str], None],
    wait_s: float = WAIT_S,
) -> str:
    """Move the run to backend ``to`` and wait for the rollout there; returns the outcome
    line. Raises ``PlntError`` (one line) when refused or when the rollout did not end
    Ready."""
    store = session.store
    stored = await store.get(KIND, namespace, name)
    if stored is None:
        raise ResourceNotFound(f"workflowruns {name!r} not found in namespace {namespace!r}")
    if await store.get("PlntBackend", None, to) is None:
        raise PlntError(f"PlntBackend {to!r} not found: plnt get backends lists them")
    body = stored.body
    status = body.get("status") or {}
    refused = _refusal(body, name=name, to=to)
    if refused:
        raise PlntError(refused)
    generation = await _patched(store, body, to=to)
    say(f"workflowrun/{name}: moving to {to} (generation {generation}); waiting for the rollout…")
    final = await _rolled_out(store, namespace, name, generation, say=say, wait_s=wait_s)
    phase = final.get("phase", "")
    if phase == Phase.PAUSED.value:
        return (
            f"workflowrun/{name} waits at its manual gate on {to}: plnt promote {name} "
            "finishes the move (the old backend serves until then)"
        )
    if phase != Phase.READY.value:
        serving = status.get("revision") or "the previous revision"
        raise PlntError(
            f"workflowrun/{name} was not moved to {to}: it ended {phase} "
            f"({final.get('message', '')}); {serving} keeps serving where it was"
        )
    return f"workflowrun/{name} moved to {_serving_on(final, to)}: phase Ready"


def _refusal(body: dict[str, Any], *, name: str, to: str) -> str:
    run = parse_resource({k: v for k, v in body.items() if k != "status"})
    assert isinstance(run, WorkflowRun)
    status = body.get("status") or {}
    phase = status.get("phase", Phase.PENDING.value)
    if phase not in {p.value for p in SETTLED}:
        return (
            f"workflowrun/{name} is {phase}: a move starts a rollout, so wait for this one "
            f"to end (or plnt abort {name}) first"
        )
    placement = run.spec.placement
    if placement is not None and placement.selector is not None:
        return (
            f"workflowrun/{name} picks its backends by spec.placement.selector: "
            f"label PlntBackend {to!r} to match it, or list backends instead"
        )
    serving = _serving(status) or list(run.spec.candidates[:1])
    if phase == Phase.READY.value and serving == [to]:
        return f"workflowrun/{name} already serves on {to}: nothing to move"
    return ""


async def _patched(store: ResourceStore, body: dict[str, Any], *, to: str) -> int:
    """Apply the run with ``to`` first; returns the new generation."""
    document = copy.deepcopy({k: v for k, v in body.items() if k != "status"})
    spec = document["spec"]
    placement = spec.get("placement")
    if placement is not None:
        placement["backends"] = [to, *(b for b in placement["backends"] if b != to)]
    else:
        spec["backend"]["cluster"] = to
    metadata = document["metadata"]
    document["metadata"] = {
        key: metadata[key]
        for key in ("name", "namespace", "labels", "annotations")
        if key in metadata
    }
    stored, outcome = await store.apply(parse_resource(document))
    if outcome == "unchanged":  # no new generation: no saga would start to wait for
        raise PlntError(_already_first(body, to))
    return int(stored.metadata["generation"])


def _already_first(body: dict[str, Any], to: str) -> str:
    """Why a move changes nothing: ``to`` is first already, and the run is elsewhere only
    when placement passed ``to`` over (its reason, from status.placement)."""
    name = body["metadata"]["name"]
    entries = (body.get("status") or {}).get("placement") or []
    why = next((e.get("reason") for e in entries if e.get("backend") == to and e.get("reason")), "")
    if why:
        return (
            f"workflowrun/{name} already lists {to} first and was placed elsewhere: {to} "
            f"was passed over ({why}); its next rollout goes there if it has room by then"
        )
    return f"workflowrun/{name} already lists {to} first: nothing to move"


async def _rolled_out(
    store: ResourceStore,
    namespace: str,
    name: str,
    generation: int,
    *,
    say: Callable[[str], None],
    wait_s: float,
) -> dict[str, Any]:
    """The run's status once the saga of ``generation`` reached a final phase."""
    last = ""

    async def watch() -> dict[str, Any]:
        nonlocal last
        async for stored in store.watch_object(KIND, namespace, name):
            if stored is None:
                raise ResourceNotFound(f"workflowruns {name!r} was deleted while moving")
            status = stored.body.get("status") or {}
            if status.get("observedGeneration") != generation:
                continue
            phase = status.get("phase", "")
            if phase != last:
                message = status.get("message")
                say(f"{name}: {phase}" + (f" ({message})" if message else ""))
                last = phase
            if phase in {p.value for p in TERMINAL_PHASES} or phase == Phase.PAUSED.value:
                return status
        raise ResourceNotFound(f"workflowruns {name!r} disappeared")

    try:
        return await asyncio.wait_for(watch(), timeout=wait_s)
    except TimeoutError:
        raise PlntError(
            f"timed out after {wait_s:g}s waiting for workflowrun/{name} to move "
            f"(last phase: {last or 'not started'}); plnt get wr {name} shows where it is"
        ) from None


def _serving_on(status: dict[str, Any], asked: str) -> str:
    """Where the run now serves: status.placement's Serving entries, else the asked one."""
    serving = _serving(status)
    if serving and serving != [asked]:
        return f"{', '.join(serving)} (asked: {asked}; plnt get wr -o yaml says why)"
    return asked


def _serving(status: dict[str, Any]) -> list[str]:
    """The backends ``status.placement`` says serve the run."""
    entries = status.get("placement") or []
    return [str(e.get("backend")) for e in entries if e.get("state") == "Serving"]
