"""Keeps every route target where its runner is observed serving.

The saga writes a target once (the canary's address at install); a runner restarted on
another port, a ``plnt up`` restarted on the same data dir, or a Kubernetes release
whose pods lost readiness would leave the router calling a dead address. The follower
watches the observed releases (the local-backend's, and the installer's for Helm
releases) and the route entries; whenever either changes it asks
``logic.followed`` what the entry should say and compare-and-sets it if that differs.
Every promoter replica runs one; their writes agree, and compare-and-set orders them
with the saga's own route writes.

It reads what it already holds from the watches, so a change that calls for no write
costs no NATS round trip; a sweep every ``resync_s`` retries a write that failed.

An observation only moves a target forward. The two watches are not ordered with each
other: a replica may see the saga's new target (written once its runner answered)
before the observed record that says so, while it still holds the runner's earlier
``Starting``. So before marking a serving target down it reads that release's record
from the bucket again, and it never takes a record older (by bucket revision) than one
it holds.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

from plnt_common.bus.bus import Bus
from plnt_common.logs import get_logger
from plnt_common.releases import ObservedRelease, run_of_release
from plnt_common.routes import RouteEntry, route_key
from plnt_promoter import logic
from plnt_promoter.adapters.followed_watch import (
    observed_changes,
    observed_now,
    observed_parts,
    route_changes,
)
from plnt_promoter.adapters.route_table import RouteTable

log = get_logger(__name__)

RESYNC_S = 5.0
"""Between two sweeps over every known route (a retry for writes that failed)."""


class RouteFollower:
    def __init__(
        self,
        *,
        bus: Bus,
        routes: RouteTable,
        resync_s: float = RESYNC_S,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._bus = bus
        self._routes = routes
        self._resync_s = resync_s
        self._clock = clock
        self._observed: dict[str, dict[str, ObservedRelease]] = {}
        """Observed records by namespace, then release."""
        self._observed_at: dict[tuple[str, str], tuple[str, int]] = {}
        """The bucket key and revision of each held record (or deletion), by (ns, release)."""
        self._entries: dict[str, tuple[RouteEntry, int]] = {}
        """The latest route entry and its KV revision, by route key."""

    async def run(self, stop: asyncio.Event) -> None:
        """Follow until ``stop`` is set."""
        tasks = [
            asyncio.create_task(self._forever(self._on_observed, self._observed_feed)),
            asyncio.create_task(self._forever(self._on_route, self._route_feed)),
            asyncio.create_task(self._sweep(stop)),
        ]
        try:
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _observed_feed(self) -> AsyncIterator[Any]:
        return observed_changes(self._bus.releases, reconnects=self._bus.reconnects)

    def _route_feed(self) -> AsyncIterator[Any]:
        return route_changes(self._bus.routes, reconnects=self._bus.reconnects)

    async def _forever(
        self, handle: Callable[..., Any], feed: Callable[[], AsyncIterator[Any]]
    ) -> None:
        while True:
            try:
                async for change in feed():
                    await handle(*change)
            except Exception as exc:  # a broken watch starts again from the current values
                log.warning("follow.watch_restarted", error=repr(exc))
                await asyncio.sleep(0.5)

    async def _on_observed(self, key: str, record: ObservedRelease | None, revision: int) -> None:
        parts = observed_parts(key)
        if parts is None or not self._hold(key, record, revision):
            return
        if record is None:  # no news is not an outage: the route keeps what it had
            return
        # the record names its run; only a record written before it did is parsed
        run = record.run_name or run_of_release(parts[1], namespace=parts[0])
        if run:
            await self._follow(route_key(parts[0], run))

    def _hold(self, key: str, record: ObservedRelease | None, revision: int) -> bool:
        """Keep ``record`` unless a newer one is held already; whether it was kept."""
        parts = observed_parts(key)
        if parts is None:
            return False
        held = self._observed_at.get(parts)
        if held is not None and held[0] == key and revision < held[1]:
            return False  # a refresh read already gave us a newer one
        self._observed_at[parts] = (key, revision)
        releases = self._observed.setdefault(parts[0], {})
        if record is None:
            releases.pop(parts[1], None)
        else:
            releases[parts[1]] = record
        return True

    async def _refresh(self, namespace: str, releases: list[str]) -> None:
        """Read the held records of ``releases`` from the bucket again."""
        for release in releases:
            held = self._observed_at.get((namespace, release))
            if held is not None:
                record, revision = await observed_now(self._bus.releases, held[0])
                self._hold(held[0], record, revision)

    async def _on_route(self, key: str, entry: RouteEntry | None, revision: int) -> None:
        if entry is None:
            self._entries.pop(key, None)
            return
        self._entries[key] = (entry, revision)
        await self._follow(key)

    async def _sweep(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(self._resync_s)
            for key in list(self._entries):
                await self._follow(key)

    async def _follow(self, key: str) -> None:
        known = self._entries.get(key)
        if known is None:
            return
        entry = known[0]
        observed = self._observed.setdefault(entry.namespace, {})
        now = self._clock()
        wanted = logic.followed(entry, observed, now=now)
        if wanted == entry:
            return
        down = logic.stepped_back(entry, wanted)
        if down:
            try:
                await self._refresh(entry.namespace, down)
            except Exception as exc:  # NATS away: the sweep tries again
                log.warning("route.follow_failed", key=key, error=repr(exc))
                return
            if logic.followed(entry, observed, now=now) == entry:
                return

        def follow(current: RouteEntry | None) -> RouteEntry | None:
            return None if current is None else logic.followed(current, observed, now=now)

        try:
            updated = await self._routes.update(
                namespace=entry.namespace,
                name=entry.name,
                change=follow,
                read=known,
                effect="route_follow",
            )
        except Exception as exc:  # NATS away, a route that kept changing: the sweep retries
            log.warning("route.follow_failed", key=key, error=repr(exc))
            return
        if updated is not None:
            for role, target in (("stable", updated.stable), ("canary", updated.canary)):
                if target is not None:
                    log.info(
                        "route.followed",
                        key=key,
                        role=role,
                        revision=target.revision,
                        url=target.url,
                        serving=target.serving,
                        reason=target.reason,
                    )
