"""``ReleaseBackend`` of the embedded mode: desired records in ``plnt-releases``, observed back.

The installer writes ``desired.<ns>.<release>``; the local-backend service (a kubelet for
runner processes) starts the runner and reports ``observed.<ns>.<release>``. This adapter
only writes desired records and reads observed ones; it never touches processes, and it
does not decide whether to install or remove anything. NATS errors become
``BusUnavailable``.
"""

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import nats.errors
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE
from pydantic import BaseModel, ValidationError

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.kv_snapshot import kv_snapshot
from plnt_common.bus.kv_watch import IDLE, next_update
from plnt_common.errors import BackendUnavailable, BusUnavailable, InstallFailed
from plnt_common.events import SpecPulled
from plnt_common.logs import get_logger
from plnt_common.releases import (
    DESIRED_PREFIX,
    OBSERVED_PREFIX,
    DesiredRelease,
    ObservedRelease,
    ReleasePhase,
    desired_key,
    observed_key,
)

log = get_logger(__name__)

RESYNC_S = 1.0
"""Between two reads of the key while its watch is quiet: heals a watch that missed an
update across a reconnect, without waiting for the whole timeout."""


_TRANSIENT = (nats.errors.Error, TimeoutError, OSError)

_Model = TypeVar("_Model", bound=BaseModel)


@dataclass(frozen=True)
class _Outcome:
    satisfied: bool
    """``done`` accepted ``last`` before the timeout."""
    last: ObservedRelease | None
    """The last observed record seen (None: none, or unreadable)."""


class UninstallTimedOut(BackendUnavailable):
    """The local-backend did not confirm a removal in time (is it running?); worth retrying."""

    retryable = True
    reason = "UninstallTimedOut"


class LocalReleaseBackend:
    """Drives the local-backend through ``plnt-releases``; see ``ReleaseBackend``.

    There is one local-backend, so the install context (``pulled``) changes nothing.
    """

    def __init__(self, bus: Bus, *, resync_s: float = RESYNC_S) -> None:
        self._kv = bus.releases
        self._nc = bus.nc
        self._resync_s = resync_s

    async def install(self, release: DesiredRelease, *, pulled: SpecPulled | None = None) -> None:
        """Record ``release`` as desired (create or replace); returns without waiting.

        A record that differs only in ``role`` (canary promoted to stable) keeps the
        running process: the local-backend restarts only when the launch changes.
        """
        key = desired_key(release.namespace, release.release)
        try:
            await self._kv.put(key, release.model_dump_json().encode())
        except _TRANSIENT as exc:
            raise BusUnavailable(f"writing {key} failed: {exc!r}") from None
        log.info("release.desired", release=release.release, revision=release.revision)

    async def wait_ready(
        self,
        *,
        namespace: str,
        release: str,
        saga_id: str,
        timeout_s: float,
        pulled: SpecPulled | None = None,
    ) -> ObservedRelease:
        """Wait until the release is observed Ready for ``saga_id`` and its desired revision.

        Raises ``InstallFailed`` with the local-backend's message (and its reason, such as
        ``DependenciesFailed``, when it gave one) when it reports Failed for this saga,
        when the release is not (or no longer) desired by this saga, and when
        ``timeout_s`` passes first (naming the release, the timeout and the last observed
        state).
        """
        name = f"{namespace}/{release}"
        desired = await self._read(desired_key(namespace, release), DesiredRelease)
        if desired is None:
            raise InstallFailed(f"release {name} is not installed: no desired record")
        if desired.saga_id != saga_id:
            raise InstallFailed(
                f"release {name} is desired by saga {desired.saga_id}, not {saga_id}"
            )

        seen_ours = False

        def ready(current: ObservedRelease | None) -> bool:
            nonlocal seen_ours
            if current is None and seen_ours:  # removed (retired, superseded) while we waited
                raise InstallFailed(f"release {name} was removed while waiting for it")
            if current is None or current.saga_id != saga_id:
                return False  # not reported yet, or a report of an earlier saga
            seen_ours = True
            if current.revision != desired.revision:
                return False
            if current.phase is ReleasePhase.FAILED:
                raise InstallFailed(
                    f"release {name} failed: {current.message}", reason=current.reason or None
                )
            return current.phase is ReleasePhase.READY

        outcome = await self._follow_observed(
            namespace=namespace, release=release, timeout_s=timeout_s, done=ready
        )
        if not outcome.satisfied or outcome.last is None:
            last = outcome.last
            state = "nothing observed"
            if last is not None:
                state = f"{last.phase.value}: {last.message}" if last.message else last.phase.value
            raise InstallFailed(
                f"release {name} was not ready after {timeout_s:g}s (last state: {state})"
            )
        return outcome.last

    async def uninstall(
        self, *, namespace: str, release: str, timeout_s: float, pulled: SpecPulled | None = None
    ) -> bool:
        """Delete the desired record and wait until the observed record is gone too.

        Returns False when neither record existed (nothing to remove). The observed record
        disappears only after the runner process is gone. Raises ``UninstallTimedOut``
        when the local-backend has not confirmed the removal within ``timeout_s``.
        """
        wanted = desired_key(namespace, release)
        present = await self._exists(wanted)
        if not present and not await self._exists(observed_key(namespace, release)):
            return False
        if present:
            try:
                await self._kv.delete(wanted)
            except _TRANSIENT as exc:
                raise BusUnavailable(f"deleting {wanted} failed: {exc!r}") from None
        outcome = await self._follow_observed(
            namespace=namespace, release=release, timeout_s=timeout_s, done=lambda o: o is None
        )
        if not outcome.satisfied:
            last = outcome.last
            state = f"{last.phase.value}, pid {last.pid}" if last else "unreadable"
            raise UninstallTimedOut(
                f"release {namespace}/{release} was still observed ({state}) {timeout_s:g}s "
                "after its removal; is the local-backend running?"
            )
        return True

    async def releases(self, *, namespace: str, run_name: str) -> list[DesiredRelease]:
        """Every desired release of ``run_name`` in ``namespace``, canary and stable, by name."""
        try:
            stored = await kv_snapshot(
                self._nc, subjects.RELEASES_BUCKET, f"{DESIRED_PREFIX}.{namespace}.*"
            )
        except _TRANSIENT as exc:
            raise BusUnavailable(f"listing releases of {namespace}: {exc!r}") from None
        found = []
        for key, (_, value) in stored.items():
            record = _parse(key, value, DesiredRelease)
            if record is not None and record.run_name == run_name:
                found.append(record)
        return sorted(found, key=lambda r: r.release)

    async def every_release(self, *, pulled: SpecPulled) -> list[DesiredRelease]:
        """Every desired release of the local-backend installed onto ``pulled``'s
        PlntBackend, of any namespace and run."""
        try:
            stored = await kv_snapshot(self._nc, subjects.RELEASES_BUCKET, f"{DESIRED_PREFIX}.>")
        except _TRANSIENT as exc:
            raise BusUnavailable(f"listing releases: {exc!r}") from None
        found = [_parse(key, value, DesiredRelease) for key, (_, value) in stored.items()]
        return [r for r in found if r is not None and r.backend_name == pulled.backend_name]

    async def still_removing(self, *, namespace: str, run_name: str) -> list[str]:
        """Releases of ``run_name`` with an observed record and no desired one: the
        local-backend is still stopping their runners (or is away)."""
        try:
            stored = await kv_snapshot(self._nc, subjects.RELEASES_BUCKET, f"*.{namespace}.*")
        except _TRANSIENT as exc:
            raise BusUnavailable(f"listing releases of {namespace}: {exc!r}") from None
        removing = []
        for key, (_, value) in stored.items():
            if not key.startswith(f"{OBSERVED_PREFIX}."):
                continue
            record = _parse(key, value, ObservedRelease)
            if record is None or record.run_name != run_name:
                continue
            if desired_key(namespace, record.release) not in stored:
                removing.append(record.release)
        return sorted(removing)

    async def status(self, *, namespace: str, release: str) -> ObservedRelease | None:
        """The observed record; None when the local-backend reports nothing (or garbage)."""
        return await self._read(observed_key(namespace, release), ObservedRelease)

    # --- helpers --------------------------------------------------------------------

    async def _follow_observed(
        self,
        *,
        namespace: str,
        release: str,
        timeout_s: float,
        done: Callable[[ObservedRelease | None], bool],
    ) -> "_Outcome":
        """Follow the observed record until ``done(record)`` (None: no record) or the timeout.

        Exceptions raised by ``done`` propagate.
        """
        key = observed_key(namespace, release)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        current = await self._read(key, ObservedRelease)
        if done(current):
            return _Outcome(satisfied=True, last=current)
        try:
            watcher: Any = await self._kv.watch(key)
        except _TRANSIENT as exc:
            raise BusUnavailable(f"watching {key} failed: {exc!r}") from None
        try:
            while (remaining := deadline - loop.time()) > 0:
                entry = await next_update(watcher, min(remaining, self._resync_s))
                if entry is IDLE:
                    # Quiet watch: read the key itself, in case the watch missed a change.
                    current = await self._read(key, ObservedRelease)
                elif entry is None:  # end of the initial value
                    continue
                elif entry.operation in (KV_DEL, KV_PURGE):
                    current = None
                else:
                    current = _parse(key, entry.value, ObservedRelease)
                if done(current):
                    return _Outcome(satisfied=True, last=current)
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()
        return _Outcome(satisfied=False, last=current)

    async def _read(self, key: str, model: type[_Model]) -> _Model | None:
        try:
            entry = await self._kv.get(key)
        except (KeyNotFoundError, KeyDeletedError):
            return None
        except _TRANSIENT as exc:
            raise BusUnavailable(f"reading {key} failed: {exc!r}") from None
        return _parse(key, entry.value, model)

    async def _exists(self, key: str) -> bool:
        try:
            await self._kv.get(key)
        except (KeyNotFoundError, KeyDeletedError):
            return False
        except _TRANSIENT as exc:
            raise BusUnavailable(f"reading {key} failed: {exc!r}") from None
        return True


def _parse(key: str, value: bytes | None, model: type[_Model]) -> _Model | None:
    try:
        return model.model_validate_json(value or b"")
    except ValidationError as exc:
        log.error("releases.unreadable_record", key=key, error=str(exc))
        return None
