"""Live progress of a saga: one line per event as it happens, with the phase it leads to.

Follows the run's events on the bus (core subscription on the stream's subjects), so a
user sees every step, compensation and failure the moment it is published.
"""

import asyncio
import time
from collections.abc import Callable

from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from plnt_common import subjects
from plnt_common.errors import SpecInvalid
from plnt_common.events import Envelope, EventType, decode_event

STEP_LABELS: dict[EventType, str] = {
    EventType.RUN_REQUESTED: "saga started, pulling the spec",
    EventType.SPEC_PULLED: "spec pulled and verified, installing the canary",
    EventType.CANARY_INSTALLED: "canary runner up, smoke-testing it",
    EventType.SMOKE_PASSED: "smoke test passed, promoting",
    EventType.SMOKE_FAILED: "smoke test failed, rolling back",
    EventType.INSTALL_FAILED: "install failed, cleaning up",
    EventType.ROUTE_RESTORED: "canary out of the route",
    EventType.STEP_TIMED_OUT: "a step passed its deadline",
    EventType.RUN_READY: "Ready: all traffic on the new revision",
    EventType.RUN_ROLLED_BACK: "RolledBack: the previous revision keeps serving",
    EventType.RUN_FAILED: "Failed",
    EventType.RUN_DELETED: "deleting routes and releases",
    EventType.RUN_REMOVED: "removed",
    EventType.SHADOW_STARTED: "shadowing: live calls mirrored to the canary",
    EventType.SHADOW_CHECKED: "shadow figures so far",
    EventType.SHADOW_PASSED: "shadow passed",
    EventType.SHADOW_FAILED: "shadow failed, rolling back",
    EventType.CANARY_STEPPED: "canary at its next step's weight",
    EventType.ANALYSIS_PASSED: "step passed",
    EventType.ANALYSIS_FAILED: "step failed, rolling back",
    EventType.PROMOTE_REQUESTED: "promotion requested",
    EventType.ABORT_REQUESTED: "abort requested",
    EventType.ROLLBACK_REQUESTED: "rollback requested",
    EventType.RUN_REVERTED: "Reverted: the kept previous revision serves again",
    EventType.CAPACITY_AWAITED: "Pending: waiting for GPUs",
    EventType.BACKEND_AWAITED: "waiting for a silent PlntBackend",
}
"""A line for every event of the run: the follower runs as a subscription callback, where
a missing one would end the progress silently."""
FAILURES = frozenset(
    {
        EventType.RUN_FAILED,
        EventType.SMOKE_FAILED,
        EventType.INSTALL_FAILED,
        EventType.STEP_TIMED_OUT,
        EventType.RUN_ROLLED_BACK,
        EventType.SHADOW_FAILED,
        EventType.ANALYSIS_FAILED,
    }
)


def describe(event: Envelope) -> str:
    """A short line about the event, with the detail a user needs."""
    label = STEP_LABELS[event.event_type]
    data = event.data
    match event.event_type:
        case EventType.SPEC_PULLED:
            ref = f"{data.get('workflow_name')}@{data.get('workflow_version')}"
            return f"{label} ({ref}, {str(data.get('spec_digest'))[:19]}…)"
        case EventType.CANARY_INSTALLED:
            return f"{label} ({data['canary']['revision']} at {data['canary']['url']})"
        case EventType.SMOKE_PASSED | EventType.SMOKE_FAILED:
            figures = data["figures"]
            return f"{label} ({figures.get('reason')})"
        case EventType.RUN_READY:
            return f"{label} {data.get('revision')}"
        case EventType.RUN_FAILED | EventType.RUN_ROLLED_BACK | EventType.INSTALL_FAILED:
            return f"{label}: {data.get('reason')}: {data.get('message')}"
        case EventType.CAPACITY_AWAITED | EventType.BACKEND_AWAITED:
            return f"{label}: {data.get('message')}"
        case _:
            return label


class SagaFollower:
    """Prints events of one run as they arrive; ``finished`` is set by a terminal event."""

    def __init__(self, *, namespace: str, name: str, say: Callable[[str], None]) -> None:
        self._filter = subjects.run_filter(namespace, name)
        self._say = say
        self._started = time.monotonic()
        self._last = self._started
        self.finished = asyncio.Event()
        self.terminal: Envelope | None = None

    async def follow(self, js: JetStreamContext) -> None:
        """Follow the stream, not core NATS: a publish the stream deduplicated never shows."""
        await js.subscribe(
            self._filter,
            stream=subjects.STREAM,
            ordered_consumer=True,
            deliver_policy=api.DeliverPolicy.NEW,
            cb=self._on_message,
        )

    async def _on_message(self, msg: Msg) -> None:
        try:
            event = decode_event(msg.data)
        except SpecInvalid:
            return
        now = time.monotonic()
        step = now - self._last
        self._last = now
        marker = "✗" if event.event_type in FAILURES else "✓"
        self._say(
            f"  {marker} {now - self._started:6.2f}s  (+{step:5.2f}s)  "
            f"{event.event_type.value:<17} {describe(event)}"
        )
        if event.event_type.is_terminal:
            self.terminal = event
            self.finished.set()
