"""``helm uninstall``: a retired or compensated release, or one remedied by starting over."""

from plnt_common.logs import get_logger
from plnt_installer.adapters.helm.finding import Found
from plnt_installer.adapters.kube_access import Connection

log = get_logger(__name__)


async def uninstall(conn: Connection, *, name: str, timeout_s: float) -> None:
    await conn.helm.uninstall(namespace=conn.namespace, name=name, timeout_s=timeout_s)


async def remove(found: Found, *, timeout_s: float) -> None:
    """Uninstall a release found on its PlntBackend."""
    conn = found.connection
    await uninstall(conn, name=found.helm.name, timeout_s=timeout_s)
    log.info(
        "helm.uninstalled",
        release=found.helm.name,
        helm_namespace=conn.namespace,
        backend=found.target.name,
    )
