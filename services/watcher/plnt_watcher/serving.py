"""The live ``Serving`` condition: whether the runners a run's route points to are up,
and a spread run's backends whose copy is down (``status.placement`` state ``Lost``).

It is not saga history: ``plnt-runs`` (what ``plnt replay`` rebuilds) never holds it.
The promoter keeps each route target's ``serving``, ``reason`` and ``since`` in step
with what the backend observes; ``ServingLoop`` follows ``plnt-routes``, and every status
the watcher writes gets the condition merged in (``with_serving``). A change of the
condition alone rewrites the run's status from its newest projection, unless a saga is in
flight (its next status write carries it).
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from plnt_common.logs import get_logger
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_common.status import ConditionType, ServingReason

log = get_logger(__name__)


@dataclass(frozen=True)
class Serving:
    """What the route says about a run's runners."""

    ok: bool
    reason: str
    message: str
    since: datetime | None
    """When it last changed; None: since the route was made (then Ready's time is used)."""
    lost: tuple[tuple[str, str], ...] = ()
    """(backend, reason) of each backend whose copy of the stable revision is down, when
    it runs on several (``spec.placement.spread``)."""


def serving_of(entry: RouteEntry | None) -> Serving | None:
    """The condition a route calls for; None while nothing takes traffic (no condition)."""
    if entry is None or not entry.has_ready_target():
        return None
    routed = [("stable", entry.stable)] if entry.stable else []
    if entry.canary is not None and entry.canary_weight > 0:
        routed.append(("canary", entry.canary))
    down = [(role, target) for role, target in routed if target is not None and not target.serving]
    if down:
        role, target = down[0]
        detail = f": {target.message}" if target.message else ""
        return Serving(
            ok=False,
            reason=target.reason or ServingReason.RUNNER_STARTING.value,
            message=f"{role} {target.revision} is not serving{detail}",
            since=target.since,
        )
    up = [target for _, target in routed if target is not None]
    lost = _lost(entry.stable)
    elsewhere = "; lost: " + ", ".join(f"{b} ({r})" for b, r in lost) if lost else ""
    return Serving(
        ok=True,
        reason=ServingReason.RUNNER_READY.value,
        message=", ".join(f"{t.revision} at {t.url}" for t in up) + elsewhere,
        since=_newest(up),
        lost=lost,
    )


def _lost(stable: RouteTarget | None) -> tuple[tuple[str, str], ...]:
    if stable is None:
        return ()
    return tuple(
        (e.backend, e.reason or ServingReason.RUNNER_STARTING.value)
        for e in stable.endpoints
        if not e.serving
    )


def _newest(targets: list[RouteTarget]) -> datetime | None:
    times = [t.since for t in targets if t.since is not None]
    return max(times) if times else None


def with_serving(status: dict[str, Any], serving: Serving | None) -> dict[str, Any]:
    """``status`` (a status document) with its ``Serving`` condition set, or removed."""
    conditions = [
        c for c in status.get("conditions") or () if c.get("type") != ConditionType.SERVING.value
    ]
    if serving is not None:
        since = serving.since.isoformat().replace("+00:00", "Z") if serving.since else None
        ready = [c for c in conditions if c.get("type") == ConditionType.READY.value]
        changed = since or (ready[0].get("lastTransitionTime") if ready else None)
        if changed:
            conditions.append(
                {
                    "type": ConditionType.SERVING.value,
                    "status": "True" if serving.ok else "False",
                    "reason": serving.reason,
                    "message": serving.message,
                    "lastTransitionTime": changed,
                    "observedGeneration": status.get("observedGeneration", 0),
                }
            )
    if serving is not None and serving.lost:
        status = {**status, "placement": _with_lost(status.get("placement") or [], serving.lost)}
    if not conditions and "conditions" not in status:
        return status
    return {**status, "conditions": conditions}


def _with_lost(
    placement: list[dict[str, Any]], lost: tuple[tuple[str, str], ...]
) -> list[dict[str, Any]]:
    """status.placement with each serving backend whose copy is down marked ``Lost``: the
    router sends its share of calls to the backends still serving."""
    reasons = dict(lost)
    return [
        {
            **entry,
            "state": "Lost",
            "reason": f"{reasons[entry['backend']]}: its calls go to the other backends",
        }
        if entry.get("state") == "Serving" and entry.get("backend") in reasons
        else entry
        for entry in placement
    ]


RETRY_S = 1.0
"""Between two attempts at a status write that failed."""

RouteFeed = Callable[[], AsyncIterator[tuple[str, RouteEntry | None]]]
Refresh = Callable[[str, str], Awaitable[None]]


class ServingLoop:
    """Follows the routes; ``lookup`` answers from memory, ``refresh`` rewrites a status."""

    def __init__(self, *, feed: RouteFeed, retry_s: float = RETRY_S) -> None:
        self._feed = feed
        self._retry_s = retry_s
        self._serving: dict[tuple[str, str], Serving] = {}
        self._unwritten: set[tuple[str, str]] = set()
        """Runs whose changed condition could not be written yet."""

    def lookup(self, namespace: str, name: str) -> Serving | None:
        return self._serving.get((namespace, name))

    def known(self) -> dict[tuple[str, str], Serving]:
        """Every run's condition as the routes say now."""
        return dict(self._serving)

    async def run(self, stop: asyncio.Event, *, refresh: Refresh) -> None:
        retrying = asyncio.create_task(self._retry(stop, refresh))
        try:
            while not stop.is_set():
                try:
                    async for key, entry in self._feed():
                        namespace, _, name = key.partition(".")
                        await self._changed((namespace, name), serving_of(entry), refresh)
                except Exception as exc:  # a broken watch starts again from the current values
                    log.warning("serving.watch_restarted", error=repr(exc))
                    await asyncio.sleep(0.5)
        finally:
            retrying.cancel()
            await asyncio.gather(retrying, return_exceptions=True)

    async def _changed(
        self, run: tuple[str, str], serving: Serving | None, refresh: Refresh
    ) -> None:
        if self._serving.get(run) == serving:
            return
        if serving is None:
            self._serving.pop(run, None)
        else:
            self._serving[run] = serving
        log.info(
            "serving.changed",
            namespace=run[0],
            name=run[1],
            serving=None if serving is None else serving.ok,
            reason=serving.reason if serving else "",
        )
        await self._write(run, refresh)

    async def _write(self, run: tuple[str, str], refresh: Refresh) -> None:
        try:
            await refresh(*run)
        except Exception as exc:  # NATS or the API away: tried again every retry_s
            log.warning("serving.status_write_failed", error=repr(exc))
            self._unwritten.add(run)
        else:
            self._unwritten.discard(run)

    async def _retry(self, stop: asyncio.Event, refresh: Refresh) -> None:
        while not stop.is_set():
            await asyncio.sleep(self._retry_s)
            for run in list(self._unwritten):
                await self._write(run, refresh)
