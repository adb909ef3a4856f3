"""The chart's console block: off by default; on, a Deployment running `plnt serve console`
with its token from a Secret, probes on /healthz, a Service, and a NetworkPolicy letting it
reach DNS, NATS and the router only; without a token Secret the chart refuses to render."""

from typing import Any

import helm_python
import pytest
from plnt_chart_kit import (
    PLNT_CHART,
    container_env,
    one,
    peer_selects,
    render,
    select,
    selector_matches,
    validate_manifest,
    with_router_keys,
)

from plnt_console.settings import ConsoleSettings

NS = "plnt-system"
CONSOLE = "plnt-console"
ENABLED = {"console": {"enabled": True, "tokenSecret": {"name": "console-token"}}}


def _render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return render(PLNT_CHART, with_router_keys(values), release="plnt", namespace=NS)


def _pod_labels(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {
        doc["metadata"]["name"]: doc["spec"]["template"]["metadata"]["labels"]
        for doc in select(docs, "Deployment")
    }


def test_the_console_is_off_by_default() -> None:
    docs = _render()
    assert [d for d in docs if d["metadata"]["name"] == CONSOLE] == []


def test_enabled_without_a_token_secret_the_chart_refuses_naming_the_value() -> None:
    with pytest.raises(
        helm_python.HelmError, match=r"console\.enabled needs console\.tokenSecret\.name"
    ):
        _render({"console": {"enabled": True}})


def test_the_deployment_serves_the_console_on_every_interface_with_its_token() -> None:
    docs = _render(ENABLED)
    deployment = one(docs, "Deployment", CONSOLE)
    validate_manifest(deployment)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["plnt", "serve", "console"]
    env = container_env(deployment)
    assert env["PLNT_CONSOLE_HOST"] == "0.0.0.0"
    assert env["PLNT_CONSOLE_PORT"] == "8081"
    assert env["PLNT_CONSOLE_TOKEN"] == {"secretKeyRef": {"name": "console-token", "key": "token"}}
    assert env["PLNT_NATS_URL"] == "nats://nats:4222"
    assert env["PLNT_NATS_REPLICAS"] == "3"  # provisions the bus as every service does
    # every PLNT_CONSOLE_* variable is a field of the console's settings
    console_fields = {f"PLNT_CONSOLE_{name.upper()}" for name in ConsoleSettings.model_fields}
    assert {k for k in env if k.startswith("PLNT_CONSOLE_")} <= console_fields
    assert container["ports"] == [{"name": "http", "containerPort": 8081, "protocol": "TCP"}]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe
    assert container["resources"]["requests"] == {"cpu": "50m", "memory": "128Mi"}
    assert pod["automountServiceAccountToken"] is True  # console.source=kubernetes: its API reads
    assert container["securityContext"]["readOnlyRootFilesystem"] is True

    service = one(docs, "Service", CONSOLE)
    validate_manifest(service)
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8081, "targetPort": "http", "protocol": "TCP"}
    ]
    assert peer_selects(
        {"podSelector": {"matchLabels": service["spec"]["selector"]}},
        _pod_labels(docs)[CONSOLE],
        NS,
        NS,
    )
    validate_manifest(one(docs, "ServiceAccount", CONSOLE))


def test_the_network_policy_lets_the_console_reach_nats_the_api_and_the_router_only() -> None:
    docs = _render(ENABLED)
    policy = one(docs, "NetworkPolicy", CONSOLE)
    validate_manifest(policy)
    labels = _pod_labels(docs)
    assert selector_matches(policy["spec"]["podSelector"], labels[CONSOLE])
    ports = {rule["ports"][0]["port"]: rule for rule in policy["spec"]["egress"]}
    assert set(ports) == {53, 4222, 443, 8080}, ports  # 443: the API server (source kubernetes)
    (router_peer,) = ports[8080]["to"]
    reached = {name for name, pod in labels.items() if peer_selects(router_peer, pod, NS, NS)}
    assert reached == {"plnt-router"}, reached
    (ingress,) = policy["spec"]["ingress"]
    assert ingress == {"ports": [{"protocol": "TCP", "port": 8081}]}  # from anywhere

    only = [{"namespaceSelector": {"matchLabels": {"team": "ops"}}}]
    outside = {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}], "ports": [{"port": 443}]}
    network = {"console": {"from": only}, "extraEgress": {"console": [outside]}}
    policy = one(_render({**ENABLED, "networkPolicy": network}), "NetworkPolicy", CONSOLE)
    (ingress,) = policy["spec"]["ingress"]
    assert ingress["from"] == only
    assert policy["spec"]["egress"][-1] == outside  # e.g. a routerPublicUrl outside


def test_the_schema_refuses_an_unknown_console_value() -> None:
    with pytest.raises(helm_python.HelmValuesError):
        _render({"console": {"enabled": True, "tokenSecret": {"name": "t"}, "tokn": "x"}})
