"""A wait's stored window: where a held canary step or the guard window is measured from.

A wait is a deadline, not a held delivery: each check is one delivery of the wait's event,
deferred to the next check (``Delivery.defer``). What the checks share lives in
``plnt-sagas`` under ``held.<sagaid>.<wait>`` (``step.<n>`` or ``guard``): the window's
start and its figures baseline, so a check in another process (a restarted promoter)
resumes the same window. The check that ends the wait deletes the record.
"""

from collections.abc import Collection, Mapping

from nats.js.errors import KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from plnt_common.bus.bus import Bus
from plnt_common.figures import RevisionTotals
from plnt_common.logs import get_logger

log = get_logger(__name__)
GUARD = "guard"
"""The guard window's wait name."""


def step_wait(step: int) -> str:
    """The wait name of canary step ``step``."""
    return f"step.{step}"


class HeldWindow(BaseModel):
    """The stored start and baseline of a wait's window."""

    model_config = ConfigDict(frozen=True)

    started: float = Field(
        description="Epoch seconds the window is measured from: the first reading of the "
        "figures (a step's, until there is one: its first check)."
    )
    baseline: dict[str, RevisionTotals] | None = Field(
        default=None,
        description="The judged revisions' totals at ``started``; None until a reading.",
    )


def baseline_of(
    reading: Mapping[str, RevisionTotals], revisions: Collection[str]
) -> dict[str, RevisionTotals]:
    """The part of a reading a window is measured from: the judged revisions only."""
    return {revision: totals for revision, totals in reading.items() if revision in revisions}


def held_key(sagaid: str, wait: str) -> str:
    return f"held.{sagaid}.{wait}"


async def load(bus: Bus, sagaid: str, wait: str) -> tuple[HeldWindow | None, int]:
    """The stored window and its revision; (None, 0) when none is stored (or unreadable)."""
    try:
        entry = await bus.sagas.get(held_key(sagaid, wait))
    except (KeyNotFoundError, KeyDeletedError):
        return None, 0
    try:
        window = HeldWindow.model_validate_json(entry.value or b"")
    except ValidationError as exc:  # a broken record: the wait starts again
        log.warning("held_window.unreadable", key=held_key(sagaid, wait), error=str(exc))
        return None, entry.revision or 0
    return window, entry.revision or 0


async def store(bus: Bus, sagaid: str, wait: str, window: HeldWindow, revision: int) -> None:
    """Write ``window`` over the record read at ``revision`` (0: none). A record written
    meanwhile by another check wins: the next check reads it."""
    key = held_key(sagaid, wait)
    payload = window.model_dump_json().encode()
    try:
        if revision:
            await bus.sagas.update(key, payload, last=revision)
        else:
            await bus.sagas.create(key, payload)
    except KeyWrongLastSequenceError:
        log.info("held_window.written_meanwhile", key=key)


async def forget(bus: Bus, sagaid: str, wait: str) -> None:
    """Delete the wait's record: its wait ended."""
    await bus.sagas.delete(held_key(sagaid, wait))
