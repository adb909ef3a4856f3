"""Fault injection for crash tests: park a saga step at a named point until it is killed.

Off by default. ``PLNT_FAULT_PAUSE=<service>:<step>:<point>[,...]`` arms points; a step
is the event a service handles (``installer:spec.pulled:after_effect``) or, for the
local backend, ``runner``. Points:

- ``after_effect``: the step's side effect happened, its outcome is not published yet;
- ``before_ack``: the outcome is published, the delivery is not acknowledged yet.

``PLNT_FAULT_ACK_WAIT_S`` (with points armed) shortens every consumer's ack wait, so the
message of a killed step comes back in seconds.

An armed point parks once: the first handler to reach it creates
``<PLNT_FAULT_REPORT_DIR>/<service>.<step>.<point>`` holding its pid, whole from the
moment it appears (so a test knows whom to kill; hidden files there are reports being
written), logs ``fault.parked`` and waits for ever; every later arrival, in this
process or a restarted one, passes. Unset, every hook returns at once. Read once, on
import; a bad value exits naming it. Not for production use.
"""

import asyncio
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from plnt_common.logs import get_logger

POINTS = ("after_effect", "before_ack")

log = get_logger(__name__)


class FaultSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PLNT_FAULT_", extra="ignore")

    pause: str = Field(default="", description="Armed points, comma separated; empty: none.")
    report_dir: Path | None = Field(
        default=None, description="Where a parked step reports itself; required with pause."
    )
    ack_wait_s: float | None = Field(
        default=None,
        gt=0,
        description="With pause: every consumer's ack wait, so a killed step's message "
        "comes back within it rather than the usual 30 s.",
    )


@dataclass(frozen=True)
class ArmedFaults:
    points: frozenset[tuple[str, str, str]]
    report_dir: Path
    ack_wait_s: float | None = None


def parse(settings: FaultSettings) -> ArmedFaults | None:
    """The armed points, or None when nothing is armed; raises ValueError naming a bad one."""
    specs = [s.strip() for s in settings.pause.split(",") if s.strip()]
    if not specs:
        return None
    if settings.report_dir is None:
        raise ValueError("PLNT_FAULT_PAUSE is set but PLNT_FAULT_REPORT_DIR is not")
    points = set()
    for spec in specs:
        parts = tuple(spec.split(":"))
        if len(parts) != 3 or not all(parts) or parts[2] not in POINTS:
            raise ValueError(
                f"PLNT_FAULT_PAUSE entry {spec!r} is not <service>:<step>:<point> "
                f"with a point among {', '.join(POINTS)}"
            )
        points.add((parts[0], parts[1], parts[2]))
    return ArmedFaults(frozenset(points), settings.report_dir, settings.ack_wait_s)


def _load() -> ArmedFaults | None:
    try:
        armed = parse(FaultSettings())
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]).upper() if first["loc"] else "?"
        raise SystemExit(f"plnt: PLNT_FAULT_{field}: {first['msg']}") from None
    except ValueError as exc:
        raise SystemExit(f"plnt: {exc}") from None
    if armed is not None:
        log.warning("fault.armed", points=sorted(":".join(p) for p in armed.points))
    return armed


_armed = _load()
"""Read once, when a service imports its handlers at start."""


def ack_wait_s(usual: float) -> float:
    """The consumers' ack wait: ``usual``, unless armed faults shorten it."""
    armed = _armed
    return usual if armed is None or armed.ack_wait_s is None else armed.ack_wait_s


async def pause_point(service: str, step: str, point: str) -> None:
    """Park for ever the first time an armed ``service:step:point`` is reached."""
    armed = _armed
    if armed is None or (service, step, point) not in armed.points:
        return
    marker = armed.report_dir / f"{service}.{step}.{point}"
    # The pid is written aside and linked in whole: a process killed for another of its
    # parked steps between claiming the marker and writing its pid would otherwise leave
    # an empty marker, a point no one reports and every later arrival passes.
    report = armed.report_dir / f".{marker.name}.{os.getpid()}.{uuid.uuid4().hex}"
    report.write_text(str(os.getpid()))
    try:
        os.link(report, marker)
    except FileExistsError:
        return  # parked once already (the test killed that process): pass
    finally:
        report.unlink()
    log.warning("fault.parked", service=service, step=step, point=point, pid=os.getpid())
    await asyncio.Event().wait()
