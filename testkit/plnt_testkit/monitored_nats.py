"""A nats-server that also serves its monitoring endpoints, for checks that read ``/connz``."""

import json
import urllib.request
from collections import Counter
from dataclasses import dataclass
from typing import Any

from plnt_common.nats_server import NatsServer


@dataclass(frozen=True)
class Traffic:
    """Messages between the server and the connections of one name."""

    sent: int
    """From the clients to the server: publishes, requests, acks, pull requests."""
    received: int
    """From the server to the clients: replies and deliveries."""


@dataclass
class MonitoredNatsServer(NatsServer):
    monitor_port: int = 0

    def argv(self) -> list[str]:
        return [*super().argv(), "-m", str(self.monitor_port)]

    def connections(self) -> list[dict[str, Any]]:
        """The open client connections, as ``/connz`` lists them."""
        url = f"http://127.0.0.1:{self.monitor_port}/connz?limit=4096"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return list(json.load(answer)["connections"])

    def connection_names(self) -> list[str]:
        return [connection.get("name", "") for connection in self.connections()]

    def traffic(self) -> dict[str, Traffic]:
        """Messages so far per connection name, over the open connections of that name."""
        sent: Counter[str] = Counter()
        received: Counter[str] = Counter()
        for connection in self.connections():
            name = connection.get("name", "")
            sent[name] += connection["in_msgs"]
            received[name] += connection["out_msgs"]
        return {name: Traffic(sent[name], received[name]) for name in sent}


def traffic_between(before: dict[str, Traffic], after: dict[str, Traffic]) -> dict[str, Traffic]:
    """What each connection name exchanged from ``before`` to ``after``; a name absent
    from ``after`` (closed meanwhile) is left out, one new since ``before`` counted whole."""
    none = Traffic(0, 0)
    return {
        name: Traffic(
            now.sent - before.get(name, none).sent,
            now.received - before.get(name, none).received,
        )
        for name, now in after.items()
    }
