"""``helm upgrade --install`` of chosen values, and the values a promotion keeps."""

from pathlib import Path
from typing import Any

from plnt_common.logs import get_logger
from plnt_common.releases import DesiredRelease
from plnt_installer.adapters.helm_values import desired_from_values, with_role
from plnt_installer.adapters.kube_access import Connection

log = get_logger(__name__)


def promoted_values(
    recorded: dict[str, Any] | None, release: DesiredRelease
) -> dict[str, Any] | None:
    """The recorded values with ``release``'s role when they install the same rollout
    (a promotion, so the pods stay as they are); None when the release must be rendered."""
    if recorded is None:
        return None
    installed = desired_from_values(name=release.release, values=recorded)
    if installed is None or (installed.saga_id, installed.revision, installed.spec_digest) != (
        release.saga_id,
        release.revision,
        release.spec_digest,
    ):
        return None
    return with_role(recorded, release.role)


async def upgrade(
    conn: Connection,
    release: DesiredRelease,
    *,
    values: dict[str, Any],
    chart: Path,
    backend_name: str,
    timeout_s: float,
) -> None:
    """``helm upgrade --install`` ``release`` with ``values``; no waiting."""
    done = await conn.helm.upgrade(
        namespace=conn.namespace,
        name=release.release,
        chart=chart,
        values=values,
        description=f"plnt {release.saga_id}: {release.revision} as {release.role.value}",
        timeout_s=timeout_s,
    )
    log.info(
        "helm.upgraded",
        release=release.release,
        helm_namespace=conn.namespace,
        backend=backend_name,
        helm_revision=done.revision,
        role=release.role.value,
    )
