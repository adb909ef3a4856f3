"""Installing a release: unlock what is there, choose the values, upgrade if they change.

A first install renders the chart values from the spec (read from ``plnt-specs`` by
digest) and the run's placement; a promotion keeps the recorded values with the new
role. A release of that name owned by another run is never touched.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plnt_common.errors import InstallFailed, SpecInvalid, SpecNotFound
from plnt_common.logs import get_logger
from plnt_common.releases import DesiredRelease
from plnt_installer.adapters.helm.finding import ReleaseFinder, Target, current_release, where
from plnt_installer.adapters.helm.unlock import unlock
from plnt_installer.adapters.helm.upgrade import promoted_values, upgrade
from plnt_installer.adapters.helm_values import (
    Placement,
    chart_values,
    desired_from_values,
    gpu_class_of,
)
from plnt_installer.kube_ports import SpecSource
from plnt_installer.remediation import Remedy

log = get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class InstallOptions:
    chart: Path
    helm_timeout_s: float
    """``--timeout`` of install, upgrade, rollback and remediation commands."""
    pending_grace_s: float
    """A pending Helm operation younger than this may be another replica's, live: wait."""


async def install(
    finder: ReleaseFinder,
    specs: SpecSource,
    options: InstallOptions,
    target: Target,
    release: DesiredRelease,
    *,
    placement: Placement | None,
) -> None:
    """Unlock the release's state, then ``helm upgrade --install`` it (if it changes)."""
    gpu_class_of(release, backend_name=target.name, backend=target.spec)  # before any I/O
    conn = await finder.connect(target)
    name = release.release
    at = where(target, conn.namespace, name)
    current, current_values = await current_release(conn, name)
    remedy = Remedy.NONE
    if current is not None:
        _refuse_foreign(current_values, release, at=at)
        remedy, current_values = await unlock(
            conn,
            current,
            current_values,
            where=at,
            pending_grace_s=options.pending_grace_s,
            helm_timeout_s=options.helm_timeout_s,
        )
    values = promoted_values(current_values, release) if placement is None else None
    if values is None:
        values = await _render(specs, target, release, placement)
    if remedy is Remedy.NONE and current is not None and values == current_values:
        log.info("helm.unchanged", release=name, helm_namespace=conn.namespace)
        return
    await upgrade(
        conn,
        release,
        values=values,
        chart=options.chart,
        backend_name=target.name,
        timeout_s=options.helm_timeout_s,
    )


def _refuse_foreign(values: dict[str, Any] | None, release: DesiredRelease, *, at: str) -> None:
    owner = desired_from_values(name=release.release, values=values or {})
    if owner is None or (owner.namespace, owner.run_name) != (
        release.namespace,
        release.run_name,
    ):
        held_by = f"{owner.namespace}/{owner.run_name}" if owner else "not plnt"
        raise InstallFailed(f"release {at} already exists and belongs to {held_by}")


async def _render(
    specs: SpecSource, target: Target, release: DesiredRelease, placement: Placement | None
) -> dict[str, Any]:
    try:
        workflow = await specs.get(release.spec_digest)
        return chart_values(
            release=release,
            workflow=workflow,
            backend_name=target.name,
            backend=target.spec,
            placement=placement,
        )
    except (SpecNotFound, SpecInvalid) as exc:  # pulled and validated before: no retry helps
        raise InstallFailed(f"release {release.release}: {exc}") from None
