"""Pure routing decisions: which revision serves the next call of a workflow.

This module is the router's decision layer. It imports no aiohttp and no nats, holds no
I/O and never reads the clock, so every decision is a plain function of its inputs and
is tested without a server. It is not the route table (see ``table.py``) and it does
not know how a call is proxied.
"""

from collections import OrderedDict
from collections.abc import Sequence

from plnt_common.names import DEFAULT_NAMESPACE
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_common.shadow_pairs import ShadowRoute

__all__ = [
    "DEFAULT_NAMESPACE",
    "CanarySplit",
    "EndpointSplit",
    "ShadowBudget",
    "choose_mirrors",
    "choose_target",
    "fallback_target",
]

PERCENT = 100


class CanarySplit:
    """Error-diffusion counter that sends exactly ``weight`` percent of calls to the canary.

    Random sampling drifts (a 5 % canary over 1,000 calls is off by ~0.7 points one time
    in three); this counter is exact instead: after ``n`` calls the canary has received
    ``round(n * weight / 100)`` of them, so the split never deviates by more than half a
    call, and consecutive canary calls are spread evenly rather than bunched together.
    One instance belongs to one route; it is not thread-safe and needs not be, because
    the router runs on one event loop.
    """

    __slots__ = ("_error",)

    def __init__(self) -> None:
        # Starting halfway rounds instead of flooring: a 5 % canary gets its first call at
        # call 10, not call 20, and the running count is the nearest integer to the ideal.
        self._error = PERCENT // 2

    def next_is_canary(self, *, weight: int) -> bool:
        """Advance by one call; true when this call belongs to the canary.

        ``weight`` may change between calls (a promotion in progress): the carried error
        stays in ``[0, 100)``, so the new weight is honoured from the next call on.
        """
        self._error += weight
        if self._error >= PERCENT:
            self._error -= PERCENT
            return True
        return False


def choose_target(*, entry: RouteEntry, split: CanarySplit) -> RouteTarget | None:
    """The target that serves the next call of ``entry``; None when nothing is ready.

    - no stable: every call goes to the canary when its weight is above 0, else None;
    - no canary, or weight 0: every call goes to stable;
    - weight 100: every call goes to the canary;
    - otherwise ``split`` decides, exactly ``canary_weight`` percent to the canary.
    ``split`` only advances when a real split happens, so time a route spends at 0 % or
    100 % leaves no debt towards either side for when it splits again.
    """
    stable, canary, weight = entry.stable, entry.canary, entry.canary_weight
    if canary is None or weight <= 0:
        return stable
    if stable is None or weight >= PERCENT:
        return canary
    return canary if split.next_is_canary(weight=weight) else stable


def fallback_target(*, entry: RouteEntry, failed: RouteTarget) -> RouteTarget | None:
    """The other target of ``entry`` to try when ``failed`` refused the connection.

    Only used when the request never reached the runner (connect refused), so trying
    once more cannot run the workflow twice. None when there is no distinct ready target.
    """
    for candidate in (entry.stable, entry.canary):
        if candidate is None or candidate.url == failed.url:
            continue
        if candidate is entry.canary and entry.canary_weight <= 0:
            continue
        return candidate
    return None


class EndpointSplit:
    """Smooth weighted round robin (nginx's) over one revision's backend endpoints.

    Why round robin and not least-outstanding: the copies of a revision are the same
    runner, so their shares should be equal and exact, like ``CanarySplit``'s; a weighted
    counter also carries the ramp of an endpoint coming back (a weight growing from a few
    percent to 1), which least-outstanding cannot express; and under a sequential load
    every endpoint has nothing outstanding, so least-outstanding would send every call to
    the first one. The smooth variant interleaves picks (weights 1:1 alternate, 1:3 give
    ``b a b b``) instead of sending a run of calls to one endpoint. Keyed by url: an
    endpoint leaving and coming back starts again from nothing.
    """

    __slots__ = ("_current",)

    def __init__(self) -> None:
        self._current: dict[str, float] = {}

    def pick(self, weighted: Sequence[tuple[str, float]]) -> int:
        """The index in ``weighted`` (``(url, weight)`` pairs, weights above 0, at least
        one pair) of the endpoint that takes the next call."""
        current = self._current
        if len(current) != len(weighted) or any(url not in current for url, _ in weighted):
            current = self._current = {url: current.get(url, 0.0) for url, _ in weighted}
        total = 0.0
        best, best_score = 0, float("-inf")
        for index, (url, weight) in enumerate(weighted):
            score = current[url] + weight
            current[url] = score
            total += weight
            if score > best_score:
                best, best_score = index, score
        current[weighted[best][0]] -= total
        return best


def choose_mirrors(
    *, shadow: ShadowRoute, canary_split: CanarySplit, noise_split: CanarySplit
) -> tuple[bool, bool]:
    """Whether the next live call is mirrored to the canary, and whether it is sent to the
    stable again (the noise floor): exactly ``percent`` and ``noise_percent`` percent of
    calls, each its own counter, so a call may be mirrored both ways."""
    return (
        canary_split.next_is_canary(weight=shadow.percent),
        noise_split.next_is_canary(weight=shadow.noise_percent),
    )


class ShadowBudget:
    """What mirrored calls spent, per saga: mirroring stops once it reaches the budget.

    One per router process: each replica counts (and stops at the budget on) its own share;
    the promoter's judge sums every replica's pairs. The oldest sagas are forgotten past
    ``max_sagas``, so a long-lived router does not grow with every rollout it served.
    """

    def __init__(self, *, max_sagas: int = 256) -> None:
        self._spent: OrderedDict[str, float] = OrderedDict()
        self._max_sagas = max_sagas

    def spent(self, saga_id: str) -> float:
        return self._spent.get(saga_id, 0.0)

    def allows(self, saga_id: str, budget_usd: float | None) -> bool:
        """True while the saga may mirror another call (no budget: always)."""
        return budget_usd is None or self.spent(saga_id) < budget_usd

    def spend(self, saga_id: str, usd: float, budget_usd: float | None) -> bool:
        """Add what one mirrored call cost; true when this very call reached the budget
        (exactly once per saga: the moment to say mirroring stops)."""
        before = self.spent(saga_id)
        self._spent[saga_id] = before + max(usd, 0.0)
        self._spent.move_to_end(saga_id)
        while len(self._spent) > self._max_sagas:
            self._spent.popitem(last=False)
        return budget_usd is not None and before < budget_usd <= self._spent[saga_id]
