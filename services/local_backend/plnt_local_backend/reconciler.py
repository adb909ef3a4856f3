"""Keeps one ``Supervisor`` task per release that is desired or left traces behind.

It implements the ``DesiredSink`` the desired watch feeds. On the first snapshot it
also looks for traces of releases nobody desires any more (a release directory, an
observed record), so a runner whose desired key was deleted while the local-backend was
down is stopped and its traces removed. With a backend set (one process per `local`
PlntBackend) it sees only the releases installed onto that backend: others' desired
records count as absent, and its traces are its own release directories and the observed
records naming its backend, so it never touches another backend's runners or records. It
holds no process itself; ``detach`` stops supervising without touching runners (the next
local-backend adopts them).
"""

import asyncio
import contextlib
import functools
from collections.abc import Mapping

from plnt_common.logs import get_logger
from plnt_common.releases import DesiredRelease
from plnt_local_backend import logic
from plnt_local_backend.adapters.health import HealthProbe
from plnt_local_backend.adapters.release_dir import release_dirs
from plnt_local_backend.adapters.release_store import ReleaseStore
from plnt_local_backend.logic import ReleaseKey
from plnt_local_backend.settings import LocalBackendSettings
from plnt_local_backend.supervisor import Supervisor

log = get_logger(__name__)


class Reconciler:
    """Desired state in, one supervisor per release out."""

    def __init__(
        self, *, settings: LocalBackendSettings, store: ReleaseStore, probe: HealthProbe
    ) -> None:
        self._settings = settings
        self._store = store
        self._probe = probe
        self._supervisors: dict[ReleaseKey, tuple[Supervisor, asyncio.Task[None]]] = {}
        self._traces_checked = False

    async def replace_all(
        self, desired: Mapping[ReleaseKey, DesiredRelease], *, unreadable: frozenset[ReleaseKey]
    ) -> None:
        """A full snapshot: start, update or tear down supervisors to match it."""
        desired = {key: record for key, record in desired.items() if self._serves(record)}
        if not self._traces_checked:
            traces = {d.key for d in release_dirs(self._settings.state_dir)}
            observed = await self._store.observed_keys()
            traces |= {key for key, owner in observed.items() if self._owns_observed(owner)}
            for key in sorted(traces - desired.keys() - unreadable):
                log.info("release.undesired_traces", namespace=key.namespace, name=key.release)
                self._ensure(key, None)
            self._traces_checked = True
        for key in list(self._supervisors):
            if key not in desired and key not in unreadable:
                await self.apply(key, None)
        for key, record in desired.items():
            await self.apply(key, record)

    async def apply(self, key: ReleaseKey, desired: DesiredRelease | None) -> None:
        """One release changed; None means its desired key was deleted."""
        if desired is not None and not self._serves(desired):
            desired = None  # another backend's: tears down only what this process runs
        current = self._supervisors.get(key)
        if desired is None and (current is None or current[1].done()):
            return
        self._ensure(key, desired)

    async def detach(self) -> None:
        """Cancel every supervisor and wait for them; runners keep running."""
        tasks = [task for _, task in self._supervisors.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._supervisors.clear()

    def _serves(self, desired: DesiredRelease) -> bool:
        return logic.serves(backend=self._settings.backend, backend_name=desired.backend_name)

    def _owns_observed(self, backend_name: str) -> bool:
        # A record written before backend_name was kept is the single-process mode's only.
        return logic.serves(backend=self._settings.backend, backend_name=backend_name)

    def _ensure(self, key: ReleaseKey, desired: DesiredRelease | None) -> None:
        current = self._supervisors.get(key)
        # A finished supervisor tore its release down and returned: start a fresh one.
        if current is not None and not current[1].done():
            if current[0].desired != desired:
                current[0].update(desired)
            return
        supervisor = Supervisor(
            key=key,
            desired=desired,
            settings=self._settings,
            store=self._store,
            probe=self._probe,
        )
        task = asyncio.create_task(supervisor.run(), name=f"plnt-local-backend-{key}")
        task.add_done_callback(functools.partial(self._finished, key))
        self._supervisors[key] = (supervisor, task)

    def _finished(self, key: ReleaseKey, task: asyncio.Task[None]) -> None:
        current = self._supervisors.get(key)
        if current is not None and current[1] is task:
            del self._supervisors[key]
        if not task.cancelled() and task.exception() is not None:
            log.error("supervisor.crashed", release=str(key), error=repr(task.exception()))
