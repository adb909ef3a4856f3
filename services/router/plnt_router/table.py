"""The router's in-memory route table: what every request reads instead of NATS.

The table is filled and kept current by ``adapters.route_watch.RouteWatcher``; request
handlers only read it, so a call costs one dict lookup and never a KV round trip. It is
not the source of truth (the ``plnt-routes`` bucket is) and it does not decide which
revision serves a call (``logic.choose_target`` does). Plain data, no I/O.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from plnt_common.routes import BackendEndpoint, RouteEntry, RouteTarget
from plnt_router.logic import CanarySplit, EndpointSplit, choose_target


@dataclass(slots=True)
class Route:
    """One workflow's current entry and the split state that outlives entry updates."""

    entry: RouteEntry
    split: CanarySplit = field(default_factory=CanarySplit)
    runners_down: bool = False
    """A revision is routed but no routed runner is serving: it is being restarted."""
    shadow_split: CanarySplit = field(default_factory=CanarySplit)
    """Which live calls are mirrored to the canary while ``entry.shadow`` is set."""
    noise_split: CanarySplit = field(default_factory=CanarySplit)
    """Which live calls go to the stable a second time (the noise floor)."""
    listed: RouteEntry | None = None
    """The entry as written, down targets included (the health gauge reads it)."""
    endpoint_splits: dict[str, EndpointSplit] = field(default_factory=dict)
    """Per revision, how its calls are split across its backend endpoints."""
    serving_endpoints: dict[str, tuple[BackendEndpoint, ...]] = field(default_factory=dict)
    """Per spread revision, its serving endpoints: worked out once per route change."""

    def pick(self) -> RouteTarget | None:
        """The target for the next call; None when nothing is ready."""
        return choose_target(entry=self.entry, split=self.split)

    def endpoint_split(self, revision: str) -> EndpointSplit:
        split = self.endpoint_splits.get(revision)
        if split is None:
            split = self.endpoint_splits[revision] = EndpointSplit()
        return split


class RouteTable:
    """Routes by KV key ``<namespace>.<name>``, plus whether the first full load is done."""

    def __init__(self) -> None:
        self._routes: dict[str, Route] = {}
        self._loaded = False

    @property
    def loaded(self) -> bool:
        """True once the watcher has applied every route that existed when it started."""
        return self._loaded

    def __len__(self) -> int:
        return len(self._routes)

    def get(self, key: str) -> Route | None:
        """The route stored under ``key``, or None when the workflow has no route."""
        return self._routes.get(key)

    def routes(self) -> Iterator[Route]:
        """Every route, in no particular order (a snapshot, safe to iterate while updated)."""
        return iter(list(self._routes.values()))

    def put(self, *, key: str, entry: RouteEntry) -> None:
        """Insert or replace ``key``; an existing route keeps its split counter.

        Stored as ``entry.serving_only()``: a runner the backend reports down gets no
        calls, decided here once per route change rather than per request.
        """
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = Route(entry=entry)
        # The split state is kept so a weight change mid-rollout stays exact.
        _store(route, entry)

    def delete(self, *, key: str) -> None:
        """Remove ``key``; removing an absent key is not an error."""
        self._routes.pop(key, None)

    def replace_all(self, entries: Mapping[str, RouteEntry]) -> None:
        """Make the table equal to ``entries`` at once and mark it loaded.

        Used after a (re)started watch has delivered every current value, so keys
        deleted while the router was disconnected disappear too.
        """
        fresh: dict[str, Route] = {}
        for key, listed in entries.items():
            route = fresh[key] = self._routes.get(key) or Route(entry=listed)
            _store(route, listed)
        self._routes = fresh
        self._loaded = True


def _store(route: Route, listed: RouteEntry) -> None:
    route.listed = listed
    route.entry = listed.serving_only()
    route.runners_down = listed.has_ready_target() and not route.entry.has_ready_target()
    spread = [t for t in (route.entry.stable, route.entry.canary) if t is not None and t.endpoints]
    route.serving_endpoints = {t.revision: tuple(t.serving_endpoints()) for t in spread}
    # Split state of revisions no longer routed is dropped; the others keep theirs.
    route.endpoint_splits = {
        revision: split
        for revision, split in route.endpoint_splits.items()
        if revision in route.serving_endpoints
    }
