"""One cluster's Helm, driven through pyhelm3: the commands the Helm backend issues.

Each method is one ``helm`` command against one kubeconfig (or Helm's own resolution,
in-cluster included, when there is none). It does not decide whether to install, roll
back or remove: the backend does, from ``remediation``. pyhelm3 runs ``helm`` as an
asyncio subprocess, so nothing here blocks the event loop; every command is also bounded
by a timeout of our own. Helm failures become project errors at this boundary.
"""

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pydantic
import yaml
from pyhelm3 import Client, Command  # type: ignore[import-untyped]
from pyhelm3 import errors as helm_errors
from pyhelm3.models import Chart, ChartMetadata  # type: ignore[import-untyped]

from plnt_common.errors import BackendUnavailable, InstallFailed, PlntError
from plnt_installer.adapters.kube_errors import KubernetesUnavailable, ReleaseBusy
from plnt_installer.remediation import HelmStatus, Revision

T = TypeVar("T")

QUERY_TIMEOUT_S = 60.0
"""Bound of a read-only command (status, history, get values, list)."""
GRACE_S = 15.0
"""Added to a mutating command's own ``--timeout``: Helm needs a moment to give up."""
HISTORY_MAX = 10
"""``--history-max``: revisions Helm keeps per release."""

_BUSY = "another operation (install/upgrade/rollback) is in progress"
_REFUSED = (
    helm_errors.FailedToRenderChartError,
    helm_errors.InvalidResourceError,
    helm_errors.ChartNotFoundError,
    helm_errors.ResourceAlreadyExistsError,
)
"""Helm refused the release itself: running the command again will not help."""


class ReleaseMissing(PlntError):
    """Helm has no release of that name in that namespace."""

    reason = "ReleaseMissing"


@dataclass(frozen=True, kw_only=True)
class HelmRelease:
    """The latest revision of a release, as ``helm status`` reports it."""

    name: str
    namespace: str
    revision: int
    status: HelmStatus
    updated: datetime
    description: str = ""

    def age_s(self, now: datetime | None = None) -> float:
        """Seconds since this revision was written."""
        return ((now or datetime.now(UTC)) - self.updated).total_seconds()


class HelmCli:
    """Helm commands against one cluster; a ``helm version`` runs once, on first use."""

    def __init__(
        self,
        *,
        executable: str = "helm",
        kubeconfig: Path | None = None,
        history_max: int = HISTORY_MAX,
    ) -> None:
        self._executable = executable
        self._command: Any = Command(
            executable=executable,
            kubeconfig=kubeconfig,
            history_max_revisions=history_max,
        )
        self._client: Any = None
        self._lock = asyncio.Lock()

    async def status(self, *, namespace: str, name: str) -> HelmRelease | None:
        """``helm status``; None when there is no such release."""
        client = await self._get_client()
        try:
            current = await self._call(
                f"helm status {namespace}/{name}",
                lambda: client.get_current_revision(name, namespace=namespace),
                timeout_s=QUERY_TIMEOUT_S,
            )
        except ReleaseMissing:
            return None
        return HelmRelease(
            name=name,
            namespace=namespace,
            revision=int(current.revision),
            status=HelmStatus.parse(str(current.status.value)),
            updated=_aware(current.updated),
            description=current.description or "",
        )

    async def history(self, *, namespace: str, name: str) -> list[Revision]:
        """``helm history``, oldest first; ``ReleaseMissing`` when there is no release."""
        entries = await self._call(
            f"helm history {namespace}/{name}",
            lambda: self._command.history(name, namespace=namespace),
            timeout_s=QUERY_TIMEOUT_S,
        )
        revisions = [
            Revision(number=int(entry["revision"]), status=HelmStatus.parse(str(entry["status"])))
            for entry in entries
        ]
        return sorted(revisions, key=lambda r: r.number)

    async def values(
        self, *, namespace: str, name: str, revision: int | None = None
    ) -> dict[str, Any]:
        """``helm get values`` (the values we passed); ``ReleaseMissing`` if there is none."""
        values = await self._call(
            f"helm get values {namespace}/{name}",
            lambda: self._command.get_values(name, namespace=namespace, revision=revision),
            timeout_s=QUERY_TIMEOUT_S,
        )
        return dict(values or {})

    async def names(self, *, namespace: str) -> list[str]:
        """``helm list`` of every release in ``namespace`` that is not superseded history."""
        client = await self._get_client()
        listed = await self._call(
            f"helm list -n {namespace}",
            lambda: client.list_release_definitions(
                include_deployed=True,
                include_failed=True,
                include_pending=True,
                include_uninstalling=True,
                namespace=namespace,
            ),
            timeout_s=QUERY_TIMEOUT_S,
        )
        return sorted(str(entry["name"]) for entry in listed)

    async def upgrade(
        self,
        *,
        namespace: str,
        name: str,
        chart: Path,
        values: dict[str, Any],
        description: str,
        timeout_s: float,
    ) -> HelmRelease:
        """``helm upgrade --install`` with ``values`` on stdin; returns the new revision.

        Does not wait for readiness (the backend reads it from the API) and does not
        create the namespace (the installer's RBAC does not allow it; the PlntBackend's
        namespace must exist).
        """
        client = await self._get_client()
        loaded = await self._chart(chart)
        done = await self._call(
            f"helm upgrade --install {namespace}/{name}",
            lambda: client.install_or_upgrade_release(
                name,
                loaded,
                values,
                create_namespace=False,
                description=description,
                namespace=namespace,
                timeout=_duration(timeout_s),
                wait=False,
            ),
            timeout_s=timeout_s + GRACE_S,
        )
        return HelmRelease(
            name=name,
            namespace=namespace,
            revision=int(done.revision),
            status=HelmStatus.parse(str(done.status.value)),
            updated=_aware(done.updated),
            description=done.description or "",
        )

    async def rollback(self, *, namespace: str, name: str, revision: int, timeout_s: float) -> None:
        """``helm rollback`` to ``revision``."""
        await self._call(
            f"helm rollback {namespace}/{name} {revision}",
            lambda: self._command.rollback(
                name, revision, namespace=namespace, timeout=_duration(timeout_s)
            ),
            timeout_s=timeout_s + GRACE_S,
        )

    async def uninstall(self, *, namespace: str, name: str, timeout_s: float) -> None:
        """``helm uninstall --wait``: returns once the release's objects are deleted."""
        client = await self._get_client()
        await self._call(
            f"helm uninstall {namespace}/{name}",
            lambda: client.uninstall_release(
                name, namespace=namespace, timeout=_duration(timeout_s), wait=True
            ),
            timeout_s=timeout_s + GRACE_S,
        )

    # --- helpers --------------------------------------------------------------------

    async def _get_client(self) -> Any:
        """The pyhelm3 client; built on a thread because it runs ``helm version``."""
        async with self._lock:
            if self._client is None:
                try:
                    self._client = await asyncio.to_thread(
                        Client, self._command, executable=self._executable
                    )
                except AssertionError:  # pyhelm3's check that the executable exists
                    raise BackendUnavailable(
                        f"the helm executable {self._executable!r} is not on PATH"
                    ) from None
                except Exception as exc:  # helm version failed: a broken installation
                    raise BackendUnavailable(
                        f"`{self._executable} version` failed: {exc!r}"
                    ) from None
            return self._client

    async def _chart(self, path: Path) -> Any:
        try:
            text = await asyncio.to_thread((path / "Chart.yaml").read_text)
            metadata = ChartMetadata(**yaml.safe_load(text))
        except (OSError, yaml.YAMLError, TypeError, pydantic.ValidationError) as exc:
            raise BackendUnavailable(f"the runner chart at {path} is unusable: {exc}") from None
        return Chart(self._command, ref=path, metadata=metadata)

    @staticmethod
    async def _call(doing: str, start: Callable[[], Awaitable[T]], *, timeout_s: float) -> T:
        """Run one pyhelm3 call, bounded by ``timeout_s``; raise only ``PlntError``s."""
        try:
            return await asyncio.wait_for(start(), timeout=timeout_s)
        except helm_errors.ReleaseNotFoundError:
            raise ReleaseMissing(f"{doing}: release not found") from None
        except TimeoutError:
            raise KubernetesUnavailable(f"{doing}: no answer in {timeout_s:g}s") from None
        except helm_errors.Error as exc:
            stderr = _stderr(exc)
            if _BUSY in stderr.lower():
                raise ReleaseBusy(f"{doing}: {stderr}") from None
            if isinstance(exc, _REFUSED):
                raise InstallFailed(f"{doing}: {stderr}") from None
            # Connection errors, cancelled contexts and whatever else Helm reports:
            # maybe transient, so retried; delivery limits bound the retries.
            raise KubernetesUnavailable(f"{doing}: {stderr}") from None


def _stderr(exc: Any) -> str:
    raw = getattr(exc, "stderr", b"") or b""
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " ".join(lines)[-600:] or f"exit status {getattr(exc, 'returncode', '?')}"


def _duration(seconds: float) -> str:
    """A Go duration for ``--timeout`` (Helm rejects a bare number)."""
    return f"{max(1, round(seconds))}s"


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
