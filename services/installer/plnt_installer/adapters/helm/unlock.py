"""Unlocking a release left mid-operation or failed, before it is upgraded.

``remediation.remediate`` decides (wait, uninstall, roll back); this module observes
what it needs (the history) and applies the decision through ``rollback``/``uninstall``.
"""

from typing import Any

from plnt_common.logs import get_logger
from plnt_installer.adapters.helm.rollback import roll_back
from plnt_installer.adapters.helm.uninstall import uninstall
from plnt_installer.adapters.helm_cli import HelmRelease
from plnt_installer.adapters.kube_access import Connection
from plnt_installer.adapters.kube_errors import ReleaseBusy
from plnt_installer.remediation import Remedy, Revision, needs_history, remediate

log = get_logger(__name__)


async def unlock(
    conn: Connection,
    current: HelmRelease,
    values: dict[str, Any] | None,
    *,
    where: str,
    pending_grace_s: float,
    helm_timeout_s: float,
) -> tuple[Remedy, dict[str, Any] | None]:
    """Apply the remediation ``current`` calls for; returns it and the values left in
    place (None once uninstalled). Raises ``ReleaseBusy`` while a young operation runs."""
    name, namespace = current.name, conn.namespace
    history: list[Revision] = []
    if needs_history(current.status):
        history = await conn.helm.history(namespace=namespace, name=name)
    plan = remediate(
        current=Revision(number=current.revision, status=current.status),
        history=history,
        age_s=current.age_s(),
        pending_grace_s=pending_grace_s,
    )
    if plan.remedy is not Remedy.NONE:
        log.warning(
            "helm.remediate",
            release=name,
            helm_namespace=namespace,
            helm_status=current.status.value,
            remedy=plan.remedy.value,
            reason=plan.reason,
        )
    match plan.remedy:
        case Remedy.WAIT:
            raise ReleaseBusy(f"release {where} is {plan.reason}")
        case Remedy.UNINSTALL:
            await uninstall(conn, name=name, timeout_s=helm_timeout_s)
            return plan.remedy, None
        case Remedy.ROLLBACK:
            assert plan.rollback_to is not None
            rolled_back = await roll_back(
                conn, name=name, revision=plan.rollback_to, timeout_s=helm_timeout_s
            )
            return plan.remedy, rolled_back
    return plan.remedy, values
