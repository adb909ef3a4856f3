"""``helm rollback`` of a release whose upgrade or rollback never finished or failed."""

from typing import Any

from plnt_installer.adapters.kube_access import Connection


async def roll_back(
    conn: Connection, *, name: str, revision: int, timeout_s: float
) -> dict[str, Any]:
    """Roll ``name`` back to ``revision``; returns the values now in place."""
    await conn.helm.rollback(
        namespace=conn.namespace, name=name, revision=revision, timeout_s=timeout_s
    )
    return await conn.helm.values(namespace=conn.namespace, name=name)
