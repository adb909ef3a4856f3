"""The embedded stack of ``plnt up``: nats-server and every service as its own process.

A dead process (a service or a nats-server node) is restarted with exponential back-off,
nats-server on the same store, and the restart is said on the console and in the
process's own log; a service's log line with a ``say`` field (long work in progress) is
said on the console too. Each `local` PlntBackend applied to the stack gets a
local-backend process of its own (``local-backend-<name>``, state in
``<data>/local-backend/<name>/``), started within a tick of being applied, supervised like
the services, and stopped once the backend is deleted and no desired release is left on
it. On Linux each child gets a parent-death signal, so even a ``kill -9`` of ``plnt up`` leaves
no server or service behind; runner processes follow the ``plnt up`` pid themselves.
"""

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from plnt_cli.local_backends import LocalBackendsWatch, backends_to_run
from plnt_cli.said import SaidLines
from plnt_common.bus.auth import NatsAuthSettings, connect_options
from plnt_common.errors import BusMisconfigured
from plnt_common.nats_server import (
    LOCAL_SYNC_INTERVAL,
    ClientAuth,
    NatsCluster,
    NatsServer,
    free_ports,
    port_is_free,
    wait_for_port,
)
from plnt_common.processes import die_with_parent, stop_process
from plnt_local_backend import stop_all_runners

SAGA_SERVICES = ("watcher", "puller", "installer", "smoke", "promoter")
SINGLETONS = ("router",)
"""One per node: the router owns a port. Local-backends are one per `local` PlntBackend."""

LOCAL_BACKEND = "local-backend"

BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)
HEALTHY_AFTER_S = 30.0
"""A service that stayed up this long starts its back-off from the beginning again."""


@dataclass
class ManagedProcess:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    next_start_at: float = 0.0
    held: bool = False
    """Stopped on purpose (``Supervisor.stop_nats``): not restarted until started again."""

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches plnt up only; it stops children in order
                preexec_fn=die_with_parent,
            )
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int:
        return self.process.pid if self.process else 0

    def note(self, line: str) -> None:
        """Append a line of the supervisor's to this process's log."""
        with self.log_path.open("a") as log:
            log.write(f"plnt up: {line}\n")


@dataclass
class StackConfig:
    data_dir: Path
    nats_port: int
    router_port: int
    replicas: int = 1
    nats_sync_interval: str = LOCAL_SYNC_INTERVAL
    extra_env: dict[str, str] = field(default_factory=dict)
    nats_peer_ports: tuple[int, ...] = ()
    """Client ports of a local NATS cluster's other nodes (``--nats-cluster``); empty: one node."""
    external_nats_url: str = ""
    """A NATS run by someone else (tests that kill cluster nodes): none is started."""
    console_port: int = 0
    """The web console's port (``plnt up --console-port``); 0: no console is started."""
    nats_auth: ClientAuth | None = None
    """What the stack's own nats-server asks of clients (``embedded_nats_auth``)."""

    @property
    def nats_ports(self) -> tuple[int, ...]:
        return (self.nats_port, *self.nats_peer_ports)

    @property
    def nats_url(self) -> str:
        """Every server, comma separated: each service's ``PLNT_NATS_URL``."""
        if self.external_nats_url:
            return self.external_nats_url
        return ",".join(f"nats://127.0.0.1:{port}" for port in self.nats_ports)

    @property
    def router_url(self) -> str:
        return f"http://127.0.0.1:{self.router_port}"

    @property
    def console_url(self) -> str:
        return f"http://127.0.0.1:{self.console_port}/" if self.console_port else ""


def choose_port(
    requested: int | None,
    default: int,
    what: str,
    say: Callable[[str], None],
    *,
    chosen_already: Collection[int] = (),
) -> int:
    """The requested port, or the default, or (when the default is taken) a free one;
    never one of ``chosen_already`` (the stack's other ports, not listened on yet)."""
    if requested is not None:
        if requested in chosen_already:
            raise SystemExit(f"plnt: port {requested} for {what} is already given to another part")
        if not port_is_free(requested):
            raise SystemExit(f"plnt: port {requested} for {what} is already in use")
        return requested
    if default not in chosen_already and port_is_free(default):
        return default
    # one candidate more than there are ports to avoid: at least one is none of them
    candidates = free_ports(len(chosen_already) + 1)
    chosen = next(port for port in candidates if port not in chosen_already)
    say(f"port {default} is taken, so {what} listens on {chosen}")
    return chosen


class Supervisor:
    """Starts, watches and stops the stack's processes."""

    def __init__(self, config: StackConfig, *, say: Callable[[str], None]) -> None:
        self.config = config
        self._say = say
        self._nats = [
            ManagedProcess(
                name=node.name if len(config.nats_ports) == 1 else f"nats-{node.name}",
                argv=node.argv(),
                env=dict(os.environ),
                log_path=node.store_dir / "nats-server.log",
            )
            for node in ([] if config.external_nats_url else local_nats_servers(config))
        ]
        self._services: list[ManagedProcess] = []
        self._local_backends: dict[str, ManagedProcess] = {}
        self._service_env: dict[str, str] = {}
        """Backend name -> its local-backend process (also in ``_services``)."""
        self._backends_watch: LocalBackendsWatch | None = None
        self._said: list[SaidLines] = []
        """Services' log lines with a ``say`` field are said on the console too."""
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def log_dir(self) -> Path:
        return self.config.data_dir / "logs"

    def _env(self) -> dict[str, str]:
        config = self.config
        env = dict(os.environ)
        env.update(
            {
                "PLNT_NATS_URL": config.nats_url,
                "PLNT_ROUTER_HOST": "127.0.0.1",
                "PLNT_ROUTER_PORT": str(config.router_port),
                "PLNT_ROUTER_PUBLIC_URL": os.environ.get(
                    "PLNT_ROUTER_PUBLIC_URL", config.router_url
                ),
                # bound to loopback: open unless the user asks for keys (plnt up says so)
                "PLNT_ROUTER_AUTH": os.environ.get("PLNT_ROUTER_AUTH", "none"),
                "PLNT_CONSOLE_PORT": str(config.console_port),
                # the root: each backend's process keeps its state in <root>/<backend>/
                "PLNT_LOCAL_BACKEND_DATA_DIR": str(config.data_dir / LOCAL_BACKEND),
                "PLNT_LOCAL_BACKEND_OWNER_PID": str(os.getpid()),
                "PLNT_LOG_FORMAT": "json",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if len(config.nats_ports) > 1 and not config.external_nats_url:
            env.setdefault("PLNT_NATS_REPLICAS", str(len(config.nats_ports)))
        env.update(config.extra_env)
        return env

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.start_nats()
        env = self._env()
        console = ["console"] if self.config.console_port else []
        names = [
            *SINGLETONS,
            *console,
            *(s for s in SAGA_SERVICES for _ in range(self.config.replicas)),
        ]
        counts: dict[str, int] = {}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
            label = (
                name
                if self.config.replicas == 1 or name in (*SINGLETONS, *console)
                else f"{name}-{counts[name]}"
            )
            service = ManagedProcess(
                name=label,
                argv=[sys.executable, "-m", "plnt_cli", "serve", name],
                env=env,
                log_path=self.log_dir / f"{label}.log",
            )
            self._said.append(SaidLines(service.log_path))
            service.start()
            self._services.append(service)
        self._service_env = env
        self._backends_watch = LocalBackendsWatch(self.config.nats_url)
        self._backends_watch.start()
        self._thread = threading.Thread(target=self._watch, name="plnt-supervisor", daemon=True)
        self._thread.start()

    @property
    def local_backend_root(self) -> Path:
        return self.config.data_dir / LOCAL_BACKEND

    def local_backends(self) -> dict[str, ManagedProcess]:
        """Backend name -> its local-backend process, as running now."""
        with self._lock:
            return dict(self._local_backends)

    def _sync_local_backends(self) -> list[tuple[str, ManagedProcess]]:
        """Start the process of each backend applied since; take out those to stop (the
        caller stops them outside the lock). Called with the lock held."""
        watch = self._backends_watch
        if watch is None:
            return []
        wanted = backends_to_run(applied=watch.applied(), with_releases=watch.with_releases())
        for name in sorted(wanted - self._local_backends.keys()):
            label = f"{LOCAL_BACKEND}-{name}"
            process = ManagedProcess(
                name=label,
                argv=[sys.executable, "-m", "plnt_cli", "serve", LOCAL_BACKEND, "--backend", name],
                env=self._service_env,
                log_path=self.log_dir / f"{label}.log",
            )
            self._said.append(SaidLines(process.log_path))
            process.start()
            self._services.append(process)
            self._local_backends[name] = process
            self._say(f"{label} started for PlntBackend {name} (pid {process.pid})")
        gone = [(n, p) for n, p in self._local_backends.items() if n not in wanted]
        for name, process in gone:
            del self._local_backends[name]
            self._services.remove(process)
        return gone

    def _stop_local_backend(self, name: str, process: ManagedProcess) -> None:
        """A deleted backend's process, then whatever runner it left (none, normally)."""
        if process.process is not None:
            stop_process(process.process)
        stop_all_runners(self.local_backend_root / name, every_backend=False)
        process.note("stopped: its PlntBackend is deleted and runs no release")
        self._say(f"{process.name} stopped: PlntBackend {name} is deleted")

    def restart_nats(self, *, kill: bool = False) -> None:
        """Stop the server (SIGKILL with ``kill``) and start it again on the same store."""
        self.stop_nats(kill=kill)
        self.start_nats()

    def stop_nats(self, *, kill: bool = False) -> None:
        """Take the bus away until ``start_nats`` (fault tests); services keep retrying."""
        with self._lock:
            for node in self._nats:
                node.held = True
                if node.process is not None:
                    stop_process(node.process, kill=kill)
                    node.process = None

    def start_nats(self) -> None:
        """Start every node not running and wait until each listens."""
        with self._lock:
            for node in self._nats:
                node.held = False
                if node.process is None:
                    node.start()
        for port in [] if self.config.external_nats_url else self.config.nats_ports:
            wait_for_port(port)

    def nats_nodes(self) -> list[ManagedProcess]:
        """The nats-server processes (one, or the nodes of ``--nats-cluster``)."""
        return list(self._nats)

    def services(self) -> list[ManagedProcess]:
        return list(self._services)

    def _watch(self) -> None:
        while not self._stopping.wait(0.2):
            with self._lock:
                for managed in [*self._nats, *self._services]:
                    if not managed.held:
                        self._check(managed)
                gone = self._sync_local_backends()
            for name, process in gone:
                self._stop_local_backend(name, process)
            for follower in self._said:
                for text in follower.new():
                    self._say(text)

    def _check(self, service: ManagedProcess) -> None:
        now = time.monotonic()
        process = service.process
        if process is not None:
            code = process.poll()
            if code is None:
                return
            uptime = now - service.started_at
            if uptime > HEALTHY_AFTER_S:
                service.restarts = 0
            delay = BACKOFF_S[min(service.restarts, len(BACKOFF_S) - 1)]
            service.restarts += 1
            service.process = None
            service.next_start_at = now + delay
            service.note(f"exited with code {code}; restarting in {delay:g}s")
            self._say(
                f"{service.name} exited with code {code}; restarting in {delay:g}s "
                f"(see {service.log_path})"
            )
            return
        if now >= service.next_start_at:
            service.start()
            service.note(f"restarted (pid {service.pid})")
            self._say(f"{service.name} restarted (pid {service.pid})")

    def stop(self) -> None:
        """Stop services, then runners, then the server; safe to call twice."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._backends_watch is not None:
            self._backends_watch.stop()
        with self._lock:
            for service in reversed(self._services):
                if service.process is not None and service.process.poll() is None:
                    service.process.terminate()
            deadline = time.monotonic() + 10
            for service in self._services:
                if service.process is None:
                    continue
                try:
                    service.process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    service.process.kill()
                    service.process.wait()
        try:
            stop_all_runners(self.local_backend_root)  # every backend's runners
        finally:
            self.stop_nats()


def embedded_nats_auth(settings: NatsAuthSettings | None = None) -> ClientAuth | None:
    """What ``plnt up``'s own nats-server asks of clients: the ``PLNT_NATS_TOKEN``, or
    ``PLNT_NATS_USER`` and ``PLNT_NATS_PASSWORD``, that its services (they inherit the
    environment) and the CLI in the same shell present. None when neither is set: the
    server listens on loopback only. Raises ``BusMisconfigured`` for what it cannot serve."""
    s = settings or NatsAuthSettings()
    connect_options(s)  # one way at most, no half settings
    if s.creds is not None:
        raise BusMisconfigured(
            "PLNT_NATS_CREDS needs a NATS run with an operator and accounts; plnt up's own "
            "NATS takes PLNT_NATS_TOKEN, or PLNT_NATS_USER and PLNT_NATS_PASSWORD"
        )
    if s.tls_ca is not None or s.tls_cert is not None:
        raise BusMisconfigured(
            "PLNT_NATS_TLS_*: plnt up's own NATS listens on loopback without TLS; unset them"
        )
    try:
        if s.token is not None:
            return ClientAuth(token=s.token.get_secret_value())
        if s.user is not None and s.password is not None:
            return ClientAuth(user=s.user, password=s.password.get_secret_value())
    except ValueError:
        raise BusMisconfigured(
            "PLNT_NATS_TOKEN, PLNT_NATS_USER, PLNT_NATS_PASSWORD: plnt up's own NATS takes "
            "printable values without quotes or backslashes"
        ) from None
    return None


def local_nats_servers(config: StackConfig) -> list[NatsServer]:
    """The stack's nats-server: one node on ``data_dir/nats``, or a local cluster."""
    if len(config.nats_ports) == 1:
        return [
            NatsServer(
                store_dir=config.data_dir / "nats",
                port=config.nats_port,
                sync_interval=config.nats_sync_interval,
                auth=config.nats_auth,
            )
        ]
    cluster = NatsCluster.local(
        config.data_dir / "nats-cluster",
        client_ports=list(config.nats_ports),
        sync_interval=config.nats_sync_interval,
        auth=config.nats_auth,
    )
    return cluster.nodes
