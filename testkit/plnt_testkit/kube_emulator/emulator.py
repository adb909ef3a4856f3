"""``KubeEmulator``: the API server on its own thread and event loop, plus test hooks.

Its own loop means a test may call the blocking ``kubernetes`` client from anywhere
(a sync test, a thread, a child process) without deadlocking the server. Hooks are
thread-safe: they run on the server's loop and return its answer.
"""

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import yaml
from aiohttp import web

from plnt_testkit.kube_emulator.crds import project_crds
from plnt_testkit.kube_emulator.faults import Fault
from plnt_testkit.kube_emulator.server import ApiHandler, Hook, Served
from plnt_testkit.kube_emulator.store import ObjectStore, Write
from plnt_testkit.kube_emulator.types import (
    CUSTOM_RESOURCE_DEFINITIONS,
    DEFAULT_TYPES,
    NAMESPACES,
    ResourceType,
)

T = TypeVar("T")
CONTEXT = "plnt-emulator"


class KubeEmulator:
    """A Kubernetes API server for tests, reached over plain HTTP on 127.0.0.1.

    ``types`` are the built-in types served besides namespaces and CRDs; ``crds`` are
    created before it listens (default: the project's, from ``crds``), so
    their resources are served and admitted by their schemas from the start. ``crds=()``
    is a cluster where plnt's CRDs are not installed yet (``kubectl apply`` them).
    ``namespaces`` exist from the start, as ``default`` and the system ones do on a
    cluster.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        types: tuple[ResourceType, ...] = DEFAULT_TYPES,
        crds: tuple[dict[str, Any], ...] | None = None,
        namespaces: tuple[str, ...] = ("default", "kube-system", "kube-public", "kube-node-lease"),
        history_window: int = 1000,
        bookmark_interval_s: float = 1.0,
        default_watch_timeout_s: float = 1800.0,
    ) -> None:
        self.store = ObjectStore(types=types, history_window=history_window)
        seed = Write(manager="kube-apiserver")
        for namespace in namespaces:
            self.store.create(NAMESPACES, None, {"metadata": {"name": namespace}}, write=seed)
        for crd in project_crds() if crds is None else crds:
            self.store.create(CUSTOM_RESOURCE_DEFINITIONS, None, crd, write=seed)
        self._handler = ApiHandler(
            store=self.store,
            bookmark_interval_s=bookmark_interval_s,
            default_watch_timeout_s=default_watch_timeout_s,
        )
        self._port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> "KubeEmulator":
        loop = asyncio.new_event_loop()
        self._loop = loop
        started = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(loop, started), name="kube-emulator", daemon=True
        )
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("the Kubernetes API emulator did not start")
        self._call(self._listen)
        return self

    def _serve(self, loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        loop.run_forever()
        loop.close()

    async def _listen(self) -> None:
        # Bind first: port 0 picks a free port, and a restart binds the same one again.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self._port))
        self._port = int(sock.getsockname()[1])
        self._runner = web.AppRunner(self._handler.app(), shutdown_timeout=1.0)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    async def _close(self) -> None:
        self.store.watches.close()  # streaming handlers end, so cleanup does not wait on them
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def restart(self) -> None:
        """Stop listening and listen again on the same port, keeping every object.

        Open connections are cut, as when the API server restarts.
        """
        self.stop_listening()
        self.listen_again()

    def stop_listening(self) -> None:
        """The API server is gone: connections are cut and refused until ``listen_again``."""
        self._call(self._close)

    def listen_again(self) -> None:
        """Back on the same port, with every object it held."""
        self._call(self._listen)

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        self._call(self._close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop = None
        self._thread = None

    def __enter__(self) -> "KubeEmulator":
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _call(self, action: Callable[[], Any]) -> Any:
        """Run ``action`` (a function or coroutine function) on the server's loop."""
        if self._loop is None:
            raise RuntimeError("the emulator is not running")

        async def run() -> Any:
            result = action()
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    # --- client configuration ----------------------------------------------------------

    def write_kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        """A kubeconfig whose current context points at this emulator."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": CONTEXT, "cluster": {"server": self.url}}],
            "users": [{"name": CONTEXT, "user": {"token": "plnt-emulator"}}],
            "contexts": [
                {
                    "name": CONTEXT,
                    "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
                }
            ],
            "current-context": CONTEXT,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    # --- test hooks --------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return int(self._call(lambda: self.store.resource_version))

    def compact(self) -> int:
        """Forget the watch history; returns the version a watch must now start from."""
        return int(self._call(self.store.compact))

    def stall_watches(self) -> int:
        """Open watches stop receiving events (a stuck connection); returns how many."""
        return int(self._call(self.store.watches.stall))

    def force_gone(self) -> int:
        """Compact the history and expire every watch: clients must re-list."""

        def both() -> int:
            self.store.compact()
            return self.store.watches.expire()

        return int(self._call(both))

    def close_watches(self) -> int:
        """End every open watch cleanly (as at its timeout); returns how many ended."""
        return int(self._call(self.store.watches.close))

    def open_watches(self, plural: str | None = None) -> list[str]:
        """The User-Agent of every open watch, of one resource plural or all."""
        return list(
            self._call(
                lambda: [
                    s.user_agent
                    for s in self.store.watches.subscriptions()
                    if plural is None or s.rtype.plural == plural
                ]
            )
        )

    def before(
        self, method: str, path_suffix: str, action: Callable[[], object], *, times: int = 1
    ) -> None:
        """Run ``action`` on the server's loop before the next ``times`` requests whose
        method is ``method`` and whose path ends with ``path_suffix`` are handled."""
        hook = Hook(method=method, path_suffix=path_suffix, action=action, times=times)
        self._call(lambda: self._handler.hooks.append(hook))

    def refuse_status_writes(
        self, *, code: int = 503, seconds: float, name: str | None = None
    ) -> None:
        """Answer ``code`` to every status write (PUT or PATCH of ``/status``), or only
        those of the object ``name``, for ``seconds`` from now."""
        suffix = f"/{name}/status" if name else "/status"
        self._add_fault(Fault(("PUT", "PATCH"), suffix, code, until=time.monotonic() + seconds))

    def refuse_updates(self, *, name: str, code: int = 422, seconds: float | None = None) -> None:
        """Answer ``code`` to every update (PUT or PATCH) of the object ``name`` itself, as
        an admission policy refusing it would; for ``seconds`` when given, else until
        ``clear_faults``."""
        until = None if seconds is None else time.monotonic() + seconds
        self._add_fault(Fault(("PUT", "PATCH"), f"/{name}", code, until=until))

    def throttle(self, *, times: int, retry_after_s: int, path_suffix: str = "") -> None:
        """Answer 429 with ``Retry-After: retry_after_s`` to the next ``times`` requests
        (those whose path ends with ``path_suffix`` when given)."""
        methods = ("GET", "PUT", "PATCH", "POST", "DELETE")
        self._add_fault(Fault(methods, path_suffix, 429, times=times, retry_after_s=retry_after_s))

    def clear_faults(self) -> None:
        self._call(self._handler.faults.clear)

    def _add_fault(self, fault: Fault) -> None:
        self._call(lambda: self._handler.faults.append(fault))

    def requests(self, method: str, path_part: str) -> int:
        """How many ``method`` requests whose path (query excluded) contains ``path_part``
        were answered, faults included (watches count once they end)."""
        return sum(
            1
            for served in self.served()
            if served.method == method and path_part in served.path.split("?")[0]
        )

    def served(self) -> list[Served]:
        """Every request answered so far (watches once they end), oldest first."""
        return list(self._call(lambda: list(self._handler.log)))

    def objects(self, rtype: ResourceType, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every stored object of ``rtype`` (in ``namespace`` when given), as listed."""
        items, _ = self._call(lambda: self.store.list_objects(rtype, namespace, lambda _: True))
        return list(items)
