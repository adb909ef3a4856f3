"""Whether a canary fits its PlntBackend now, and on which node: a pure decision.

A runner pod needs ``gpuCount`` GPUs of its class on one node, so a canary fits only if
some node has that many free (``largestFreeOnOneNode`` >= N; a ``local`` backend is one
node with its declared ``capacity``); each of its ``replicas`` pods is booked on a node
(the fullest that still fits, so large holes stay whole). What is free is the last
observation (``plnt_common.capacity``) minus the reservations of placements the
observation does not count yet: those still installing, and those up since it was made.
A class without a resource to count (``local`` with no declared capacity, or an unknown
class) is not enforced.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from plnt_common.capacity import ClassCapacity, Reservation
from plnt_common.releases import DesiredRelease


@dataclass(frozen=True)
class Refusal:
    """No node fits: what the run's Pending message says."""

    needed: int
    largest_free: int
    message: str
    unreachable: bool = False
    """The backend's API did not answer: its nodes are unknown, so it is passed over."""


def release_key(release: DesiredRelease) -> str:
    return f"{release.namespace}/{release.release}"


def still_counted(
    reservation: Reservation, observed_at: datetime, *, now: datetime, hold_s: float
) -> bool:
    """A reservation counts until an observation made after its runner came up, or, if
    it never comes up, ``hold_s`` after it was made."""
    if reservation.up_at is None:
        return (now - reservation.reserved_at).total_seconds() <= hold_s
    return reservation.up_at >= observed_at


def free_now(
    capacity: ClassCapacity,
    reservations: Iterable[Reservation],
    *,
    now: datetime,
    hold_s: float,
    excluding: str = "",
) -> dict[str, int]:
    """Free GPUs per node once the reservations the observation does not count are taken."""
    nodes = dict(capacity.nodes)
    for reservation in reservations:
        if reservation.gpu_class != capacity.gpu_class or reservation.release == excluding:
            continue
        counted = still_counted(reservation, capacity.observed_at, now=now, hold_s=hold_s)
        if counted and reservation.node in nodes:
            nodes[reservation.node] = max(0, nodes[reservation.node] - reservation.gpus)
    return nodes


def place(
    *,
    canary: DesiredRelease,
    capacity: ClassCapacity,
    reservations: Iterable[Reservation],
    now: datetime,
    hold_s: float,
) -> list[Reservation] | Refusal:
    """The reservations that book the canary's pods, or why it fits no node now.

    The canary's own earlier reservations (a redelivered install) are replaced, not added.
    """
    key = release_key(canary)
    nodes = free_now(capacity, reservations, now=now, hold_s=hold_s, excluding=key)
    needed = canary.gpu_count
    booked: list[Reservation] = []
    for _ in range(max(1, canary.replicas)):
        fitting = [name for name, free in nodes.items() if free >= needed]
        if not fitting:
            largest = max(nodes.values(), default=0)
            return Refusal(
                needed=needed,
                largest_free=largest,
                message=(
                    f"no node has {needed} free {capacity.resource_name or capacity.gpu_class} "
                    f"(largest {largest})"
                ),
            )
        node = min(fitting, key=lambda name: (nodes[name], name))
        nodes[node] -= needed
        booked.append(
            Reservation(
                release=key,
                gpu_class=capacity.gpu_class,
                node=node,
                gpus=needed,
                reserved_at=now,
            )
        )
    return booked


def after_booking(
    current: Iterable[Reservation],
    booked: list[Reservation],
    *,
    release: str,
    observed_at: datetime,
    now: datetime,
    hold_s: float,
) -> tuple[Reservation, ...]:
    """The reservations to store: the release's own replaced, the ones the latest
    observation counts (or that expired) dropped."""
    kept = [
        r
        for r in current
        if r.release != release and still_counted(r, observed_at, now=now, hold_s=hold_s)
    ]
    return (*kept, *booked)


def marked_up(
    current: Iterable[Reservation], *, release: str, now: datetime
) -> tuple[Reservation, ...]:
    """The release's reservations stamped with when its runner came up."""
    return tuple(
        r.model_copy(update={"up_at": now}) if r.release == release and r.up_at is None else r
        for r in current
    )


def without(current: Iterable[Reservation], *, release: str) -> tuple[Reservation, ...]:
    return tuple(r for r in current if r.release != release)
