"""Which `local` PlntBackends ``plnt up`` runs a local-backend process for, kept live.

``LocalBackendsWatch`` follows two KV buckets in a thread of its own (the supervisor's loop
is synchronous): the PlntBackends in ``plnt-resources`` and the desired and observed
releases in ``plnt-releases``. A KV watch rather than a periodic listing: an applied
backend gets its process as soon as the supervisor's next tick (0.2 s) sees it, and a quiet
stack costs nothing. ``backends_to_run`` decides; this module starts no process.
"""

import asyncio
import contextlib
import functools
import json
import threading
from collections.abc import Collection, Mapping

from nats.js.kv import KeyValue

from plnt_common import subjects
from plnt_common.bus.connection import connect
from plnt_common.bus.kv_mirror import KvMirror
from plnt_common.logs import get_logger
from plnt_common.releases import DESIRED_PREFIX, OBSERVED_PREFIX
from plnt_common.resource_store import CLUSTER_SCOPE, PLURALS

log = get_logger(__name__)

BACKEND_KEYS = f"{PLURALS['PlntBackend']}.{CLUSTER_SCOPE}.*"


def backends_to_run(*, applied: Collection[str], with_releases: Collection[str]) -> set[str]:
    """Every applied `local` PlntBackend, and every backend a desired release or an observed
    record names: one the stack does not store (the PlntBackends are read from a Kubernetes
    API), or a deleted one whose runners its own process must tear down first. A release
    whose desired record is deleted is torn down until its observed record goes, so that
    record keeps the process too. Only the installer's local releases have these records,
    so no other type of backend gets a process."""
    return set(applied) | {name for name in with_releases if name}


class LocalBackendsWatch:
    """The applied `local` PlntBackends and the backends that have desired releases."""

    def __init__(self, nats_url: str) -> None:
        self._nats_url = nats_url
        self._backends: dict[str, bool] = {}
        """Name -> whether it is a live `local` PlntBackend (not another type, not deleting)."""
        self._releases: dict[str, dict[str, str]] = {DESIRED_PREFIX: {}, OBSERVED_PREFIX: {}}
        """Per prefix, desired or observed key -> the backend_name its record names."""
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._run, name="plnt-local-backends", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._cancel)
            self._thread.join(timeout=5)

    def applied(self) -> set[str]:
        with self._lock:
            return {name for name, local in self._backends.items() if local}

    def with_releases(self) -> set[str]:
        with self._lock:
            return {name for records in self._releases.values() for name in records.values()}

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def _run(self) -> None:
        self._task = self._loop.create_task(self._follow())
        try:
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except Exception:
            # e.g. NATS refusing plnt up's credentials: no backend would ever get a process.
            log.exception("up.local_backends_watch_failed")
        finally:
            self._loop.close()

    async def _follow(self) -> None:
        nc = await connect(self._nats_url, name="plnt-up-local-backends", retry_on_start=True)
        backends = KvMirror[bool](
            nc=nc,
            bucket=subjects.RESOURCES_BUCKET,
            keys=BACKEND_KEYS,
            decode=_is_local_backend,
            replace_all=self._replace_backends,
            apply=self._apply_backend,
            log_as="up.backends",
        )
        releases = [
            KvMirror[str](
                nc=nc,
                bucket=subjects.RELEASES_BUCKET,
                keys=f"{prefix}.>",
                decode=_backend_name,
                replace_all=functools.partial(self._replace_releases, prefix),
                apply=functools.partial(self._apply_release, prefix),
                log_as=f"up.{prefix}",
            )
            for prefix in (DESIRED_PREFIX, OBSERVED_PREFIX)
        ]
        try:
            await asyncio.gather(backends.run(), *(mirror.run() for mirror in releases))
        finally:
            with contextlib.suppress(Exception):
                await nc.close()

    async def _replace_backends(self, loaded: Mapping[str, bool]) -> None:
        with self._lock:
            self._backends = {key.rsplit(".", 1)[-1]: local for key, local in loaded.items()}

    async def _apply_backend(self, key: str, local: bool | None) -> None:
        with self._lock:
            self._backends[key.rsplit(".", 1)[-1]] = bool(local)

    async def _replace_releases(self, prefix: str, loaded: Mapping[str, str]) -> None:
        with self._lock:
            self._releases[prefix] = dict(loaded)

    async def _apply_release(self, prefix: str, key: str, backend_name: str | None) -> None:
        with self._lock:
            if backend_name is None:
                self._releases[prefix].pop(key, None)
            else:
                self._releases[prefix][key] = backend_name


def _is_local_backend(entry: KeyValue.Entry) -> bool:
    """Whether the stored PlntBackend is a live `local` one; a body that does not parse is not."""
    try:
        body = json.loads(entry.value or b"")
        deleting = bool(body["metadata"].get("deletionTimestamp"))
        return body["spec"].get("type") == "local" and not deleting
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("up.backend_unreadable", key=entry.key)
        return False


def _backend_name(entry: KeyValue.Entry) -> str | None:
    """The backend a desired or observed record names; "" (no process of a backend runs it)
    when unread."""
    try:
        name = json.loads(entry.value or b"").get("backend_name", "")
    except (ValueError, AttributeError):
        return ""
    return str(name or "")
