"""Which backend endpoints of a spread revision take calls, as the router saw them answer.

Passive: a connection refused or timed out, a call that timed out, a connection broken
before the status line, or a 502/503/504 status counts as one failure; ``down_after``
failures in a row take the endpoint out of the split. Active: ``adapters.health_probe``
asks every endpoint's health route; ``PROBE_FAILURES_DOWN`` failed probes in a row take an
endpoint out (a hung runner answers no call to count), and while it is out a 200 brings it
back, at a weight that ramps from
``MIN_RAMP_WEIGHT`` to 1 over ``ramp_s`` seconds, so a backend that just came back is not
handed its whole share at once. Plain data and the clock; no I/O.

Only endpoints that failed are kept: a healthy endpoint costs one dict miss per call.
"""

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

MIN_RAMP_WEIGHT = 0.05
"""An endpoint that just came back gets one call in about twenty of its fair share's."""
PROBE_FAILURES_DOWN = 2
"""Health probes failed in a row that take out an endpoint the calls still reach: a
runner that accepts connections but no longer answers (hung, or its host stalled) gives
the calls themselves nothing to count until their timeout."""


@dataclass(slots=True)
class _State:
    failures: int = 0
    probe_failures: int = 0
    down: bool = False
    ramp_until: float = 0.0
    """Monotonic time its ramp ends; 0 when not ramping."""


class EndpointHealth:
    """Health of runner endpoints by url, shared by every route that lists them."""

    def __init__(
        self,
        *,
        down_after: int,
        ramp_s: float,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._down_after = down_after
        self._ramp_s = ramp_s
        self._clock = clock
        self._states: dict[str, _State] = {}
        self.on_change = on_change
        """Called after an endpoint went down or came back (the health gauge follows)."""

    def weight(self, url: str) -> float:
        """The endpoint's share factor: 0 while down, ramping after a return, else 1."""
        state = self._states.get(url)
        if state is None:
            return 1.0
        if state.down:
            return 0.0
        if not state.ramp_until:
            return 1.0
        left = state.ramp_until - self._clock()
        if left <= 0:
            state.ramp_until = 0.0
            return 1.0
        return max(MIN_RAMP_WEIGHT, 1.0 - left / self._ramp_s)

    def is_up(self, url: str) -> bool:
        state = self._states.get(url)
        return state is None or not state.down

    def failed(self, url: str) -> None:
        """One passive failure; the ``down_after``-th in a row takes the endpoint out."""
        state = self._states.get(url)
        if state is None:
            state = self._states[url] = _State()
        state.failures += 1
        if not state.down and state.failures >= self._down_after:
            state.down = True
            state.ramp_until = 0.0
            self._changed()

    def probe_failed(self, url: str) -> None:
        """An up endpoint's health route did not answer 200 in time; the
        ``PROBE_FAILURES_DOWN``-th time in a row takes it out."""
        state = self._states.get(url)
        if state is None:
            state = self._states[url] = _State()
        state.probe_failures += 1
        if not state.down and state.probe_failures >= PROBE_FAILURES_DOWN:
            state.down = True
            state.ramp_until = 0.0
            self._changed()

    def probe_answered(self, url: str) -> None:
        """An up endpoint's health route answered 200: its probe failures restart."""
        state = self._states.get(url)
        if state is not None:
            state.probe_failures = 0

    def answered(self, url: str) -> None:
        """A call got a real answer: the failure count restarts; a down endpoint (tried
        because every one was down) is back, on the ramp."""
        state = self._states.get(url)
        if state is None:
            return
        if state.down:
            self.recovered(url)
        else:
            state.failures = 0

    def recovered(self, url: str) -> None:
        """The health route answered 200: back in the split, its weight ramping up."""
        state = self._states.get(url)
        if state is None or not state.down:
            return
        state.down = False
        state.failures = 0
        state.probe_failures = 0
        state.ramp_until = self._clock() + self._ramp_s if self._ramp_s > 0 else 0.0
        self._changed()

    def down(self) -> list[str]:
        """The urls out of the split now (what the probe asks)."""
        return [url for url, state in self._states.items() if state.down]

    def forget_except(self, urls: Iterable[str]) -> None:
        """Drop what is known of endpoints no route lists any more."""
        keep = set(urls)
        for url in [url for url in self._states if url not in keep]:
            del self._states[url]

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()
