"""Watch plumbing of the emulator: the bounded event history and the open watches.

Every write becomes a ``WatchEvent`` kept in a history of at most ``window`` events; a
watch starting at a version the history no longer reaches gets 410 Expired. Open watches
are fed as writes happen. Test hooks stall watches (a stuck connection), expire them
(ERROR 410) or close them (a clean end). It knows nothing of how objects are written:
the store records each write here.
"""

import asyncio
import copy
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from plnt_testkit.kube_emulator.types import ApiError, ResourceType

EventType = Literal["ADDED", "MODIFIED", "DELETED"]
Match = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class WatchEvent:
    """One write as watchers see it; ``previous`` lets a selector see objects leave it."""

    resource_version: int
    rtype: ResourceType
    type: EventType
    object: dict[str, Any]
    previous: dict[str, Any] | None


class Expired:
    """Sentinel queued to a watch that must end with 410 (its position was compacted)."""


class Closed:
    """Sentinel queued to a watch the server ends cleanly (shutdown, or a test hook)."""


@dataclass(eq=False)
class Subscription:
    """One open watch: what it filters on and the queue the store feeds."""

    rtype: ResourceType
    namespace: str | None
    match: Match
    user_agent: str = ""
    queue: asyncio.Queue[WatchEvent | Expired | Closed] = field(default_factory=asyncio.Queue)
    stalled: bool = False
    """A stalled watch gets no events and no bookmarks, like a stuck connection."""

    def sees(self, event: WatchEvent) -> WatchEvent | None:
        """The event as this watch reports it, or None when it is not for this watch."""
        if event.rtype != self.rtype:
            return None
        if self.namespace and event.object["metadata"].get("namespace") != self.namespace:
            return None
        if event.type == "DELETED":
            return event if self.match(event.object) else None
        now_in = self.match(event.object)
        was_in = event.previous is not None and self.match(event.previous)
        if now_in and was_in:
            return event
        if now_in:  # moved into the selector: the watch sees it appear
            return WatchEvent(event.resource_version, event.rtype, "ADDED", event.object, None)
        if was_in:  # moved out of the selector: the watch sees it go
            return WatchEvent(event.resource_version, event.rtype, "DELETED", event.object, None)
        return None


class WatchHub:
    """The history and the open watches; single-threaded like the store that owns it."""

    def __init__(self, *, window: int) -> None:
        self.window = window
        self._history: deque[WatchEvent] = deque()
        self.compacted = 0
        """Every event at or below this version is gone from the history."""
        self._subscriptions: set[Subscription] = set()

    def record(
        self,
        *,
        version: int,
        rtype: ResourceType,
        event_type: EventType,
        body: dict[str, Any],
        previous: dict[str, Any] | None,
    ) -> None:
        """Keep one write and hand it to every open watch it concerns."""
        event = WatchEvent(
            version,
            rtype,
            event_type,
            copy.deepcopy(body),
            copy.deepcopy(previous) if previous is not None else None,
        )
        self._history.append(event)
        while len(self._history) > self.window:
            self.compacted = self._history.popleft().resource_version
        for subscription in self._subscriptions:
            seen = subscription.sees(event)
            if seen is not None and not subscription.stalled:
                subscription.queue.put_nowait(seen)

    def since(self, subscription: Subscription, version: int) -> list[WatchEvent]:
        """What ``subscription`` missed after ``version``; 410 when that is forgotten."""
        if version < self.compacted:
            raise ApiError.gone(version, self.compacted)
        return [
            seen
            for event in self._history
            if event.resource_version > version and (seen := subscription.sees(event)) is not None
        ]

    def add(self, subscription: Subscription) -> None:
        self._subscriptions.add(subscription)

    def remove(self, subscription: Subscription) -> None:
        self._subscriptions.discard(subscription)

    def subscriptions(self) -> list[Subscription]:
        return list(self._subscriptions)

    def compact(self, *, up_to: int) -> int:
        """Drop the whole history: a watch from any version before ``up_to`` gets 410."""
        self._history.clear()
        self.compacted = up_to
        return self.compacted

    def stall(self) -> int:
        """Open watches stop receiving anything until they are expired or closed."""
        for subscription in self._subscriptions:
            subscription.stalled = True
        return len(self._subscriptions)

    def expire(self) -> int:
        """End every open watch with a 410 ERROR event, as when its position is compacted."""
        return self._end(Expired())

    def close(self) -> int:
        """End every open watch cleanly, as the server does at its request timeout."""
        return self._end(Closed())

    def close_types(self, rtypes: set[ResourceType]) -> int:
        """End the open watches of ``rtypes`` cleanly (their CRD is gone)."""
        return self._end(Closed(), only=rtypes)

    def _end(self, sentinel: "Expired | Closed", only: set[ResourceType] | None = None) -> int:
        ended = [s for s in self._subscriptions if only is None or s.rtype in only]
        for subscription in ended:
            subscription.queue.put_nowait(sentinel)
            self._subscriptions.discard(subscription)
        return len(ended)
