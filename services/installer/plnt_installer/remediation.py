"""What to do with a Helm release before installing or upgrading it: pure decisions.

Helm refuses to upgrade a release whose last operation never finished ("another
operation is in progress") and a failed release is half applied, so, like Flux
helm-controller (``internal/reconcile/atomic_release.go``), the installer first remedies
the state it observes: a stuck or failed *install* is uninstalled and installed again, a
stuck or failed *upgrade* or *rollback* is rolled back to the last revision that deployed.

A pending state is someone's live operation until it is older than a grace period (an
installer replica may be applying it right now), so a young one is waited for. Nothing
here runs Helm; the Helm backend observes, calls ``remediate``, and acts.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class HelmStatus(StrEnum):
    """A release revision's status as Helm reports it (``helm/pkg/release/status.go``)."""

    UNKNOWN = "unknown"
    """Helm could not tell."""
    DEPLOYED = "deployed"
    """Applied and current."""
    UNINSTALLED = "uninstalled"
    """Uninstalled with ``--keep-history``: only the record is left."""
    SUPERSEDED = "superseded"
    """Deployed once, replaced by a newer revision."""
    FAILED = "failed"
    """The operation that made this revision failed."""
    UNINSTALLING = "uninstalling"
    """An uninstall started and has not finished."""
    PENDING_INSTALL = "pending-install"
    """An install started and has not finished."""
    PENDING_UPGRADE = "pending-upgrade"
    """An upgrade started and has not finished."""
    PENDING_ROLLBACK = "pending-rollback"
    """A rollback started and has not finished."""

    @classmethod
    def parse(cls, value: str) -> "HelmStatus":
        """The status named ``value``; anything Helm may add later reads as UNKNOWN."""
        try:
            return cls(value.lower())
        except ValueError:
            return cls.UNKNOWN


PENDING = frozenset(
    {
        HelmStatus.PENDING_INSTALL,
        HelmStatus.PENDING_UPGRADE,
        HelmStatus.PENDING_ROLLBACK,
        HelmStatus.UNINSTALLING,
    }
)
"""States of an operation in flight: someone's, or a crashed one's."""

WAS_DEPLOYED = frozenset({HelmStatus.DEPLOYED, HelmStatus.SUPERSEDED})
"""Revisions that were applied successfully at some point: rollback targets."""


@dataclass(frozen=True, kw_only=True)
class Revision:
    """One revision of a release, from ``helm history`` or ``helm status``."""

    number: int
    status: HelmStatus


class Remedy(StrEnum):
    """What to do to the release before ``helm upgrade --install``."""

    NONE = "none"
    """Proceed: nothing there, or a deployed release to upgrade."""
    WAIT = "wait"
    """An operation is in flight and young: try again later, touch nothing."""
    UNINSTALL = "uninstall"
    """Remove the release, then install it afresh."""
    ROLLBACK = "rollback"
    """Roll back to ``rollback_to``, then upgrade."""


@dataclass(frozen=True, kw_only=True)
class Remediation:
    remedy: Remedy
    rollback_to: int | None = None
    """The revision to roll back to (ROLLBACK only)."""
    reason: str
    """Why, in words an operator reads in the log."""


def last_deployed(history: Sequence[Revision], *, before: int) -> int | None:
    """The newest revision older than ``before`` that deployed successfully, if any."""
    candidates = [r.number for r in history if r.number < before and r.status in WAS_DEPLOYED]
    return max(candidates, default=None)


def needs_history(status: HelmStatus) -> bool:
    """Whether ``remediate`` needs the history for a release in ``status``."""
    return status not in (
        HelmStatus.DEPLOYED,
        HelmStatus.PENDING_INSTALL,
        HelmStatus.UNINSTALLING,
        HelmStatus.UNINSTALLED,
    )


def remediate(
    *,
    current: Revision | None,
    history: Sequence[Revision] = (),
    age_s: float = float("inf"),
    pending_grace_s: float = 0.0,
) -> Remediation:
    """The remedy for a release whose latest revision is ``current`` (None: no release).

    ``age_s`` is how long ago ``current`` was written; a pending state younger than
    ``pending_grace_s`` is waited for rather than broken.
    """
    if current is None:
        return Remediation(remedy=Remedy.NONE, reason="not installed")
    status = current.status
    if status is HelmStatus.DEPLOYED:
        return Remediation(remedy=Remedy.NONE, reason="deployed")
    if status in PENDING and age_s < pending_grace_s:
        return Remediation(
            remedy=Remedy.WAIT,
            reason=f"{status.value} for {age_s:.0f}s, within the {pending_grace_s:g}s grace",
        )
    if status is HelmStatus.PENDING_INSTALL:
        return Remediation(remedy=Remedy.UNINSTALL, reason="install never finished")
    if status in (HelmStatus.UNINSTALLING, HelmStatus.UNINSTALLED):
        # Finish the uninstall (and drop a kept history), so the install starts clean.
        return Remediation(remedy=Remedy.UNINSTALL, reason=f"release is {status.value}")
    # pending-upgrade, pending-rollback, failed, unknown (and a current "superseded", which
    # Helm never leaves behind): back to the last good revision, or start over without one.
    target = last_deployed(history, before=current.number)
    if target is None:
        return Remediation(
            remedy=Remedy.UNINSTALL,
            reason=f"{status.value} with no earlier deployed revision (a failed install)",
        )
    return Remediation(
        remedy=Remedy.ROLLBACK,
        rollback_to=target,
        reason=f"{status.value}: back to revision {target}, the last that deployed",
    )
