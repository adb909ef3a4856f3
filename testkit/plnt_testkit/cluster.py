"""Reading a JetStream cluster's state, for tests and benchmarks that fail its nodes."""

import asyncio
import shutil
import time

from nats.js import JetStreamContext

from plnt_common import subjects
from plnt_common.nats_server import NatsServer, wait_for_port


async def stream_leader(js: JetStreamContext, stream: str = subjects.STREAM) -> str:
    """The server name of the node leading ``stream`` now; waits through an election."""
    while True:
        try:
            info = await js.stream_info(stream)
            if info.cluster is not None and info.cluster.leader:
                return info.cluster.leader
        except Exception:  # no leader answers during an election
            pass
        await asyncio.sleep(0.1)


async def wait_until_replicated(
    js: JetStreamContext, *, peers: int = 2, timeout_s: float = 60.0
) -> None:
    """Every stream has a leader and its ``peers`` other replicas are current.

    Raises AssertionError naming what lags after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    lagging: list[str] = []
    while time.monotonic() < deadline:
        lagging = []
        try:
            for info in await js.streams_info():
                cluster = info.cluster
                if cluster is None or not cluster.leader:
                    lagging.append(f"{info.config.name}: no leader")
                    continue
                replicas = cluster.replicas or []
                if len(replicas) != peers or not all(r.current and not r.offline for r in replicas):
                    lagging.append(f"{info.config.name}: {replicas}")
        except Exception as exc:  # the API itself is electing
            lagging.append(repr(exc))
        if not lagging:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"the cluster did not catch up within {timeout_s}s: {lagging}")


def restart_node(node: NatsServer, *, wipe: bool = False) -> None:
    """SIGKILL ``node``; start it again on its store, or on an empty one with ``wipe``.

    Call it on the main thread, never through ``asyncio.to_thread``: the node's
    parent-death signal fires when the thread that started it ends, and an executor's
    thread ends with its event loop."""
    node.stop(kill=True)
    if wipe:
        shutil.rmtree(node.store_dir / "jetstream")
    node.spawn()
    wait_for_port(node.port)
