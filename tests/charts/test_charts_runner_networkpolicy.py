"""The runner chart's NetworkPolicy: the runner's port reachable only from the plnt
chart's router and smoke pods (selectors checked against the labels charts/plnt really
renders on them) in plnt's namespace, from a configured metrics scraper and from the
callers a PlntBackend adds (plnt in another cluster); egress open unless restricted."""

from typing import Any

from plnt_chart_kit import (
    PLNT_CHART,
    RUNNER_CHART,
    one,
    render,
    select,
    selector_matches,
    validate_manifest,
    with_router_keys,
)

PLNT_NS = "plnt-system"
RUNNER_NS = "agents"


def _policy(values: dict[str, Any]) -> dict[str, Any]:
    docs = render(RUNNER_CHART, values, release="agents-rr-g1", namespace=RUNNER_NS)
    policy = one(docs, "NetworkPolicy")
    validate_manifest(policy)
    return policy


def _plnt_pod_labels() -> dict[str, dict[str, str]]:
    docs = render(PLNT_CHART, with_router_keys(), release="plnt", namespace=PLNT_NS)
    return {
        doc["metadata"]["name"]: doc["spec"]["template"]["metadata"]["labels"]
        for doc in select(docs, "Deployment")
    }


def _admits(peer: dict[str, Any], *, namespace: str, labels: dict[str, str]) -> bool:
    ns_labels = {"kubernetes.io/metadata.name": namespace}
    return selector_matches(peer.get("namespaceSelector"), ns_labels) and selector_matches(
        peer.get("podSelector"), labels
    )


def test_only_router_and_smoke_pods_of_plnt_reach_the_runner_port() -> None:
    policy = _policy({"networkPolicy": {"plntNamespace": PLNT_NS}})
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress open by default
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 8080, "protocol": "TCP"}]
    (peer,) = rule["from"]  # no scraper configured
    admitted = {
        name
        for name, labels in _plnt_pod_labels().items()
        if _admits(peer, namespace=PLNT_NS, labels=labels)
    }
    assert admitted == {"plnt-router", "plnt-smoke"}, admitted
    router = _plnt_pod_labels()["plnt-router"]
    assert not _admits(peer, namespace="elsewhere", labels=router)


def test_metrics_scraper_and_restricted_egress() -> None:
    scraper = {"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}
    egress = [{"ports": [{"port": 53, "protocol": "UDP"}]}]
    policy = _policy(
        {"networkPolicy": {"metricsScraper": scraper, "restrictEgress": True, "egress": egress}}
    )
    peers = policy["spec"]["ingress"][0]["from"]
    assert peers[0]["namespaceSelector"] == {}  # no plntNamespace: any namespace
    assert peers[1] == scraper
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["egress"] == egress


def test_disabled_renders_no_policy() -> None:
    docs = render(RUNNER_CHART, {"networkPolicy": {"enabled": False}}, release="r", namespace="a")
    assert select(docs, "NetworkPolicy") == []


def test_callers_from_another_cluster_are_admitted_beside_plnt_s_own_pods() -> None:
    callers = [
        {"ipBlock": {"cidr": "10.8.0.0/16", "except": []}},
        {"namespaceSelector": {"matchLabels": {"name": "mcs-gateway"}}},
    ]
    policy = _policy({"networkPolicy": {"plntNamespace": PLNT_NS, "extraFrom": callers}})
    own, *others = policy["spec"]["ingress"][0]["from"]
    assert others == callers
    assert _admits(own, namespace=PLNT_NS, labels=_plnt_pod_labels()["plnt-router"])
