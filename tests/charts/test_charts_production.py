"""charts/plnt for a shared production cluster, rendered with real Helm and validated
object by object: NATS auth and TLS from Secrets, default-deny NetworkPolicies whose
selectors are evaluated against the rendered pods (and the plnt-runner chart's pods), the
router's auth and its metrics off the public port, Ingress and HTTPRoute, probes on every
service's metrics port, topology spread and PDBs, and the values schema's pod fields."""

import copy
import functools
import ipaddress
import json
import shutil
from pathlib import Path
from typing import Any

import helm_python
import pytest
from plnt_chart_kit import (
    PLNT_CHART,
    RUNNER_CHART,
    container_env,
    one,
    peer_selects,
    render,
    select,
    selector_matches,
    validate_any,
    with_router_keys,
)

NAMESPACE = "plnt-system"
SERVICES = ("watcher", "puller", "installer", "smoke", "promoter", "router")
KEYS_FAILURE = "router.auth is keys but router.apiKeysSecret.name is empty"

USER_PASSWORD = {"existingSecret": "nats-client", "userKey": "user", "passwordKey": "password"}
MTLS = {"enabled": True, "existingSecret": "nats-client-tls"}
SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "router-open": {"router": {"auth": "none"}},
    "nats-user-password-mtls": {"nats": {"auth": USER_PASSWORD, "tls": MTLS}},
    "nats-token": {"nats": {"auth": {"existingSecret": "nats-client", "tokenKey": "token"}}},
    "nats-creds-server-tls": {
        "nats": {
            "auth": {"existingSecret": "nats-client", "credsKey": "plnt.creds"},
            "tls": {**MTLS, "certKey": "", "keyKey": ""},
        }
    },
    "ingress-and-httproute": {
        "router": {
            "ingress": {
                "enabled": True,
                "className": "nginx",
                "hosts": ["agents.example.com"],
                "tls": {"secretName": "agents-tls"},
            },
            "httpRoute": {
                "enabled": True,
                "parentRefs": [{"name": "public", "namespace": "gateways", "sectionName": "https"}],
                "hostnames": ["agents.example.com"],
            },
        }
    },
    "replicated-with-pod-fields": {
        "priorityClassName": "plnt-control-plane",
        **{
            service: {
                "replicaCount": 3,
                "priorityClassName": f"{service}-priority",
                "podSecurityContext": {"fsGroupChangePolicy": "OnRootMismatch"},
                "securityContext": {"runAsUser": 20002},
                "podDisruptionBudget": {"minAvailable": 2},
            }
            for service in SERVICES
        },
    },
    "external-nats-elsewhere": {
        "externalNatsUrl": "nats://nats.messaging.svc.cluster.local:4222",
        "installer": {"targetNamespaces": ["agents"]},
    },
    "network-policies-off": {"networkPolicy": {"enabled": False}},
}


def _render(values: dict[str, Any], chart: Path = PLNT_CHART) -> list[dict[str, Any]]:
    """The chart's objects for ``values`` plus the router's keys Secret; a value set
    renders once per session (tests only read the objects: each gets its own copy)."""
    return copy.deepcopy(_rendered(json.dumps(values, sort_keys=True), chart))


@functools.cache
def _rendered(values: str, chart: Path) -> list[dict[str, Any]]:
    return render(chart, with_router_keys(json.loads(values)), namespace=NAMESPACE)


def _deployments(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        doc["metadata"]["labels"]["app.kubernetes.io/component"]: doc
        for doc in select(docs, "Deployment")
    }


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_feature_renders_valid_kubernetes(name: str) -> None:
    docs = _render(SCENARIOS[name])
    assert len(_deployments(docs)) == len(SERVICES)
    for doc in docs:
        validate_any(doc)


# ---- the router: auth, metrics off the public port, Ingress, HTTPRoute -------------------


def test_keys_without_a_keys_secret_fails_to_render_with_one_clear_line() -> None:
    with pytest.raises(helm_python.HelmRenderError) as failure:
        render(PLNT_CHART, {}, namespace=NAMESPACE)
    message = str(failure.value)
    assert KEYS_FAILURE in message
    assert "router.auth=none" in message
    assert "\n" not in message.strip()


def test_router_auth_is_keys_with_the_secret_and_none_only_when_asked() -> None:
    keyed = container_env(_deployments(_render({}))["router"])
    assert keyed["PLNT_ROUTER_AUTH"] == "keys"
    assert keyed["PLNT_ROUTER_API_KEYS"] == {
        "secretKeyRef": {"name": "router-api-keys", "key": "api-keys.json"}
    }
    open_router = render(PLNT_CHART, {"router": {"auth": "none"}}, namespace=NAMESPACE)
    env = container_env(_deployments(open_router)["router"])
    assert env["PLNT_ROUTER_AUTH"] == "none"
    assert "PLNT_ROUTER_API_KEYS" not in env


def test_the_public_service_never_reaches_the_metrics_port() -> None:
    docs = _render({})
    router = _deployments(docs)["router"]
    ports = {p["name"]: p["containerPort"] for p in _container(router)["ports"]}
    env = container_env(router)
    assert env["PLNT_ROUTER_METRICS_PORT"] == str(ports["metrics"])
    assert env["PLNT_ROUTER_PORT"] == str(ports["http"])
    assert ports["metrics"] != ports["http"]
    service = one(docs, "Service")
    targets = {ports.get(p["targetPort"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert targets == {ports["http"]}


def test_router_metrics_port_on_the_public_port_is_refused() -> None:
    with pytest.raises(helm_python.HelmRenderError, match=r"router\.metricsPort must differ"):
        _render({"router": {"metricsPort": 8080}})


def test_ingress_sends_its_hosts_to_the_router_service_with_tls() -> None:
    docs = _render(SCENARIOS["ingress-and-httproute"])
    service = one(docs, "Service")
    ingress = one(docs, "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"hosts": ["agents.example.com"], "secretName": "agents-tls"}]
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "agents.example.com"
    (path,) = rule["http"]["paths"]
    assert path["backend"]["service"] == {
        "name": service["metadata"]["name"],
        "port": {"name": "http"},
    }
    assert [p["name"] for p in service["spec"]["ports"]] == ["http"]


def test_httproute_attaches_to_the_gateways_tls_listener_and_reaches_the_router() -> None:
    docs = _render(SCENARIOS["ingress-and-httproute"])
    service = one(docs, "Service")
    route = one(docs, "HTTPRoute")
    assert route["spec"]["parentRefs"] == [
        {"name": "public", "namespace": "gateways", "sectionName": "https"}
    ]
    assert route["spec"]["hostnames"] == ["agents.example.com"]
    (rule,) = route["spec"]["rules"]
    assert rule["backendRefs"] == [
        {"name": service["metadata"]["name"], "port": service["spec"]["ports"][0]["port"]}
    ]


def test_ingress_and_httproute_are_off_by_default_and_refuse_half_configurations() -> None:
    docs = _render({})
    assert not select(docs, "Ingress") and not select(docs, "HTTPRoute")
    with pytest.raises(helm_python.HelmRenderError, match=r"router\.ingress\.hosts is empty"):
        _render({"router": {"ingress": {"enabled": True}}})
    with pytest.raises(helm_python.HelmRenderError, match="parentRefs is empty"):
        _render({"router": {"httpRoute": {"enabled": True}}})


# ---- NATS auth and TLS ---------------------------------------------------------------------


def _mounted_files(deployment: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Path in the container -> (Secret, key) of every Secret item mounted."""
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    files: dict[str, tuple[str, str]] = {}
    for mount in _container(deployment)["volumeMounts"]:
        secret = volumes[mount["name"]].get("secret")
        if secret is None:
            continue
        assert mount["readOnly"] is True
        for item in secret["items"]:
            files[f"{mount['mountPath']}/{item['path']}"] = (secret["secretName"], item["key"])
    return files


@pytest.mark.parametrize("service", SERVICES)
def test_nats_user_password_and_mtls_reach_every_service(service: str) -> None:
    deployment = _deployments(_render(SCENARIOS["nats-user-password-mtls"]))[service]
    env = container_env(deployment)
    assert env["PLNT_NATS_USER"] == {"secretKeyRef": {"name": "nats-client", "key": "user"}}
    assert env["PLNT_NATS_PASSWORD"] == {"secretKeyRef": {"name": "nats-client", "key": "password"}}
    assert not {"PLNT_NATS_TOKEN", "PLNT_NATS_CREDS"} & env.keys()
    files = _mounted_files(deployment)
    assert files[env["PLNT_NATS_TLS_CA"]] == ("nats-client-tls", "ca.crt")
    assert files[env["PLNT_NATS_TLS_CERT"]] == ("nats-client-tls", "tls.crt")
    assert files[env["PLNT_NATS_TLS_KEY"]] == ("nats-client-tls", "tls.key")


@pytest.mark.parametrize("service", SERVICES)
def test_nats_token_reaches_every_service(service: str) -> None:
    env = container_env(_deployments(_render(SCENARIOS["nats-token"]))[service])
    assert env["PLNT_NATS_TOKEN"] == {"secretKeyRef": {"name": "nats-client", "key": "token"}}
    assert not {"PLNT_NATS_USER", "PLNT_NATS_CREDS", "PLNT_NATS_TLS_CA"} & env.keys()


@pytest.mark.parametrize("service", SERVICES)
def test_a_nats_creds_file_and_server_tls_are_mounted_where_the_env_says(service: str) -> None:
    deployment = _deployments(_render(SCENARIOS["nats-creds-server-tls"]))[service]
    env = container_env(deployment)
    files = _mounted_files(deployment)
    assert files[env["PLNT_NATS_CREDS"]] == ("nats-client", "plnt.creds")
    assert files[env["PLNT_NATS_TLS_CA"]] == ("nats-client-tls", "ca.crt")
    assert not {"PLNT_NATS_TLS_CERT", "PLNT_NATS_TLS_KEY", "PLNT_NATS_USER"} & env.keys()


def test_no_nats_auth_or_tls_by_default() -> None:
    for deployment in _deployments(_render({})).values():
        assert not [name for name in container_env(deployment) if "NATS_T" in name]
        assert not {"PLNT_NATS_USER", "PLNT_NATS_CREDS"} & container_env(deployment).keys()
        assert _mounted_files(deployment) == {}


@pytest.mark.parametrize(
    "nats",
    [
        {"auth": {"existingSecret": "nats-client", "userKey": "user"}},
        {"auth": {"existingSecret": "nats-client", "tokenKey": "t", "credsKey": "c"}},
        {"auth": {"tokenKey": "token"}},
        {"auth": {"existingSecret": "nats-client"}},
        {"auth": {"existingSecret": "nats-client", "tokenKey": "t", "tokn": "x"}},
        {"tls": {"enabled": True}},
        {"tls": {"enabled": True, "existingSecret": "tls", "keyKey": ""}},
    ],
    ids=[
        "user-without-password",
        "token-and-creds",
        "key-without-secret",
        "secret-without-key",
        "typo",
        "tls-without-secret",
        "cert-without-key",
    ],
)
def test_half_nats_auth_or_tls_configurations_are_refused_by_the_schema(
    nats: dict[str, Any],
) -> None:
    with pytest.raises(helm_python.HelmValuesError, match="/nats/"):
        _render({"nats": nats})


# ---- NetworkPolicies -------------------------------------------------------------------------


def _pod(deployment: dict[str, Any]) -> dict[str, Any]:
    return {
        "labels": deployment["spec"]["template"]["metadata"]["labels"],
        "namespace": deployment["metadata"]["namespace"],
    }


def _runner_pod(namespace: str) -> dict[str, Any]:
    """A runner pod as the installer installs it: the plnt-runner chart, rendered."""
    values = {"workflowRun": {"name": "review-responder"}, "revision": "1.2.0-g3"}
    docs = render(RUNNER_CHART, values, release="agents-review-responder-g3", namespace=namespace)
    deployment = one(docs, "Deployment")
    ports = [p["containerPort"] for p in _container(deployment)["ports"]]
    return {
        "labels": deployment["spec"]["template"]["metadata"]["labels"],
        "namespace": namespace,
        "port": ports[0],
    }


def _policies_of(policies: list[dict[str, Any]], pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod["namespace"]
        and selector_matches(p["spec"]["podSelector"], pod["labels"])
    ]


def _port_matches(rule: dict[str, Any], port: int, protocol: str) -> bool:
    ports = rule.get("ports")
    return not ports or any(
        p.get("protocol", "TCP") == protocol and p.get("port") in (None, port) for p in ports
    )


def _peer_allows(peer: dict[str, Any], policy_namespace: str, other: dict[str, Any] | str) -> bool:
    if isinstance(other, str):  # an address outside the cluster's pods
        block = peer.get("ipBlock")
        return block is not None and ipaddress.ip_address(other) in ipaddress.ip_network(
            block["cidr"]
        )
    return peer_selects(peer, other["labels"], other["namespace"], policy_namespace)


def egress_allowed(
    policies: list[dict[str, Any]],
    pod: dict[str, Any],
    to: dict[str, Any] | str,
    port: int,
    protocol: str = "TCP",
) -> bool:
    """Whether the policies let ``pod`` open a connection to ``to`` (a pod or an IP), as
    Kubernetes evaluates them: isolated by any Egress policy, then allowed by any rule."""
    isolating = [p for p in _policies_of(policies, pod) if "Egress" in p["spec"]["policyTypes"]]
    if not isolating:
        return True
    return any(
        _port_matches(rule, port, protocol)
        and (
            "to" not in rule
            or any(_peer_allows(peer, p["metadata"]["namespace"], to) for peer in rule["to"])
        )
        for p in isolating
        for rule in p["spec"].get("egress") or []
    )


def ingress_allowed(
    policies: list[dict[str, Any]], pod: dict[str, Any], source: dict[str, Any], port: int
) -> bool:
    isolating = [p for p in _policies_of(policies, pod) if "Ingress" in p["spec"]["policyTypes"]]
    if not isolating:
        return True
    return any(
        _port_matches(rule, port, "TCP")
        and (
            "from" not in rule
            or any(_peer_allows(peer, p["metadata"]["namespace"], source) for peer in rule["from"])
        )
        for p in isolating
        for rule in p["spec"].get("ingress") or []
    )


KUBE_DNS = {"labels": {"k8s-app": "kube-dns"}, "namespace": "kube-system"}
NATS_POD = {"labels": {"app.kubernetes.io/name": "nats"}, "namespace": NAMESPACE}
PROMETHEUS = {"labels": {"app.kubernetes.io/name": "prometheus"}, "namespace": "monitoring"}
STRANGER = {"labels": {"app": "curl"}, "namespace": "team-b"}
API_SERVER = "10.96.0.1"
REGISTRY = "52.216.0.10"


def _network(values: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    docs = _render(values)
    return select(docs, "NetworkPolicy"), {
        service: _pod(d) for service, d in _deployments(docs).items()
    }


def test_every_control_plane_pod_is_denied_by_default_and_has_exactly_its_own_policy() -> None:
    policies, pods = _network({})
    deny = [p for p in policies if p["metadata"]["name"].endswith("-default-deny")]
    (deny_all,) = deny
    assert "ingress" not in deny_all["spec"] and "egress" not in deny_all["spec"]
    for service, pod in pods.items():
        own = [p for p in _policies_of(policies, pod) if p is not deny_all]
        assert [p["metadata"]["name"] for p in own] == [f"plnt-{service}"], service
        assert deny_all in _policies_of(policies, pod)
    assert not _policies_of(policies, NATS_POD)
    assert not _policies_of(policies, _runner_pod(NAMESPACE))


@pytest.mark.parametrize("service", SERVICES)
def test_every_service_reaches_dns_and_nats_and_nothing_on_other_ports(service: str) -> None:
    policies, pods = _network({"networkPolicy": {"kubeApi": {"cidrs": ["10.96.0.0/12"]}}})
    pod = pods[service]
    assert egress_allowed(policies, pod, KUBE_DNS, 53, "UDP")
    assert egress_allowed(policies, pod, KUBE_DNS, 53, "TCP")
    assert egress_allowed(policies, pod, NATS_POD, 4222)
    assert not egress_allowed(policies, pod, NATS_POD, 8222)  # NATS monitoring
    assert not egress_allowed(policies, pod, STRANGER, 8080)
    uses_api = service in ("watcher", "puller", "installer")
    assert egress_allowed(policies, pod, API_SERVER, 443) is uses_api
    assert egress_allowed(policies, pod, REGISTRY, 443) is (service == "puller")
    assert egress_allowed(policies, pod, REGISTRY, 80) is (service == "puller")


def test_only_the_router_and_smoke_reach_runner_pods_in_the_target_namespaces() -> None:
    policies, pods = _network({"installer": {"targetNamespaces": ["agents", "agents-gpu"]}})
    for namespace in ("agents", "agents-gpu"):
        runner = _runner_pod(namespace)
        for service, pod in pods.items():
            allowed = egress_allowed(policies, pod, runner, runner["port"])
            assert allowed is (service in ("router", "smoke")), (service, namespace)
    elsewhere = _runner_pod("team-b")
    assert not egress_allowed(policies, pods["router"], elsewhere, elsewhere["port"])
    assert not egress_allowed(policies, pods["router"], STRANGER, 8080)


def test_runner_pods_default_to_the_release_namespace() -> None:
    policies, pods = _network({})
    runner = _runner_pod(NAMESPACE)
    assert egress_allowed(policies, pods["router"], runner, runner["port"])
    assert not egress_allowed(policies, pods["router"], _runner_pod("agents"), runner["port"])


def test_router_public_port_is_open_and_metrics_only_for_the_scrapers() -> None:
    docs = _render({})
    policies = select(docs, "NetworkPolicy")
    deployments = _deployments(docs)
    router = _pod(deployments["router"])
    ports = {p["name"]: p["containerPort"] for p in _container(deployments["router"])["ports"]}
    assert ingress_allowed(policies, router, STRANGER, ports["http"])
    assert not ingress_allowed(policies, router, STRANGER, ports["metrics"])
    assert ingress_allowed(policies, router, PROMETHEUS, ports["metrics"])
    for service, deployment in deployments.items():
        pod = _pod(deployment)
        metrics = int(container_env(deployment)[f"PLNT_{service.upper()}_METRICS_PORT"])
        assert ingress_allowed(policies, pod, PROMETHEUS, metrics), service
        assert not ingress_allowed(policies, pod, STRANGER, metrics), service
        if service != "router":
            assert not ingress_allowed(policies, pod, PROMETHEUS, 8080), service


def test_router_public_port_can_be_limited_to_the_ingress_controller() -> None:
    controller = {"labels": {"app": "ingress-nginx"}, "namespace": "ingress-nginx"}
    values = {
        "networkPolicy": {
            "router": {
                "from": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}
                        }
                    }
                ]
            }
        }
    }
    policies, pods = _network(values)
    assert ingress_allowed(policies, pods["router"], controller, 8080)
    assert not ingress_allowed(policies, pods["router"], STRANGER, 8080)


def test_nats_in_another_namespace_is_reached_there_only() -> None:
    policies, pods = _network(SCENARIOS["external-nats-elsewhere"])
    there = {"labels": {"app.kubernetes.io/name": "nats"}, "namespace": "messaging"}
    for pod in pods.values():
        assert egress_allowed(policies, pod, there, 4222)
        assert not egress_allowed(policies, pod, NATS_POD, 4222)


def test_the_nats_charts_pods_are_reached_by_their_labels(tmp_path: Path) -> None:
    chart = tmp_path / "plnt"
    shutil.copytree(PLNT_CHART, chart)
    stub = chart / "charts" / "nats"
    stub.mkdir(parents=True)
    (stub / "Chart.yaml").write_text("apiVersion: v2\nname: nats\nversion: 1.3.0\n")
    docs = _render({"nats": {"enabled": True}}, chart=chart)
    policies = select(docs, "NetworkPolicy")
    # the labels the official NATS chart puts on its StatefulSet's pods
    ours = {
        "labels": {"app.kubernetes.io/name": "nats", "app.kubernetes.io/instance": "plnt"},
        "namespace": NAMESPACE,
    }
    other_release = {
        "labels": {"app.kubernetes.io/name": "nats", "app.kubernetes.io/instance": "other"},
        "namespace": NAMESPACE,
    }
    for deployment in _deployments(docs).values():
        assert egress_allowed(policies, _pod(deployment), ours, 4222)
        assert not egress_allowed(policies, _pod(deployment), other_release, 4222)


def test_a_nats_outside_the_cluster_needs_its_peers_named() -> None:
    values: dict[str, Any] = {"externalNatsUrl": "tls://nats.example.com:4222"}
    with pytest.raises(helm_python.HelmRenderError, match=r"networkPolicy\.nats\.to"):
        _render(values)
    values["networkPolicy"] = {"nats": {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}]}}
    policies, pods = _network(values)
    assert egress_allowed(policies, pods["watcher"], "203.0.113.7", 4222)
    assert not egress_allowed(policies, pods["watcher"], "198.51.100.7", 4222)


def test_extra_egress_is_added_to_its_service_only() -> None:
    minio = {"labels": {"app": "minio"}, "namespace": "minio"}
    rule = {
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "minio"}}}],
        "ports": [{"protocol": "TCP", "port": 9000}],
    }
    policies, pods = _network({"networkPolicy": {"extraEgress": {"puller": [rule]}}})
    assert egress_allowed(policies, pods["puller"], minio, 9000)
    assert not egress_allowed(policies, pods["installer"], minio, 9000)


def test_network_policies_can_be_switched_off() -> None:
    assert not select(_render(SCENARIOS["network-policies-off"]), "NetworkPolicy")


# ---- probes, spread, PDBs -------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [{}, {service: {"metricsPort": 9100 + i} for i, service in enumerate(SERVICES)}],
    ids=["defaults", "own-ports"],
)
def test_every_deployment_probes_its_declared_metrics_port(values: dict[str, Any]) -> None:
    for service, deployment in _deployments(_render(values)).items():
        container = _container(deployment)
        declared = {p["name"]: p["containerPort"] for p in container["ports"]}
        metrics = container_env(deployment)[f"PLNT_{service.upper()}_METRICS_PORT"]
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = container[probe]["httpGet"]
            assert get["path"] == path, (service, probe)
            port = declared.get(get["port"], get["port"])
            assert port in declared.values(), (service, probe)
            assert str(port) == metrics, (service, probe)
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == metrics


def test_a_service_without_a_metrics_port_is_refused() -> None:
    with pytest.raises(helm_python.HelmValuesError, match="metricsPort"):
        _render({"smoke": {"metricsPort": 0}})


def test_replicated_services_spread_over_nodes_and_keep_a_pdb() -> None:
    docs = _render({"puller": {"replicaCount": 3}})
    pdbs = select(docs, "PodDisruptionBudget")
    for service, deployment in _deployments(docs).items():
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        spec = deployment["spec"]["template"]["spec"]
        guarded = [p for p in pdbs if selector_matches(p["spec"]["selector"], pod_labels)]
        if deployment["spec"]["replicas"] > 1:
            (spread,) = spec["topologySpreadConstraints"]
            assert spread["topologyKey"] == "kubernetes.io/hostname"
            assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
            assert spread["maxSkew"] == 1
            assert selector_matches(spread["labelSelector"], pod_labels)
            (pdb,) = guarded
            assert pdb["spec"] == {"maxUnavailable": 1, "selector": pdb["spec"]["selector"]}
        else:
            assert "topologySpreadConstraints" not in spec, service
            assert guarded == [], service
    assert {p["metadata"]["name"] for p in pdbs} == {"plnt-watcher", "plnt-puller", "plnt-router"}
    # a PDB selects its own service's pods only
    for pdb in pdbs:
        selected = [
            service
            for service, d in _deployments(docs).items()
            if selector_matches(
                pdb["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"]
            )
        ]
        assert selected == [pdb["metadata"]["name"].removeprefix("plnt-")]


def test_own_spread_constraints_and_min_available_win() -> None:
    own = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "router"}},
        }
    ]
    values = {
        "router": {"topologySpreadConstraints": own, "podDisruptionBudget": {"minAvailable": 1}}
    }
    docs = _render(values)
    router = _deployments(docs)["router"]
    assert router["spec"]["template"]["spec"]["topologySpreadConstraints"] == own
    pdb = one(docs, "PodDisruptionBudget", "plnt-router")
    assert pdb["spec"]["minAvailable"] == 1
    assert "maxUnavailable" not in pdb["spec"]


# ---- the values schema's pod fields ------------------------------------------------------------

POD_FIELDS: dict[str, Any] = {
    "priorityClassName": "plnt-critical",
    "topologySpreadConstraints": [
        {
            "maxSkew": 2,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
        }
    ],
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "plnt"}],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cp"]}]}
                ]
            }
        }
    },
    "nodeSelector": {"pool": "cp"},
    "podAnnotations": {"team": "platform"},
    "podLabels": {"cost-center": "ml"},
    "securityContext": {
        "runAsUser": 20002,
        "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/plnt.json"},
    },
    "podSecurityContext": {"fsGroupChangePolicy": "OnRootMismatch", "runAsUser": 20002},
    "resources": {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
}


@pytest.mark.parametrize("service", SERVICES)
def test_the_schema_accepts_the_usual_pod_fields_and_they_reach_the_pod(service: str) -> None:
    docs = _render({service: POD_FIELDS})
    deployment = _deployments(docs)[service]
    template = deployment["spec"]["template"]
    spec = template["spec"]
    container = _container(deployment)
    assert spec["priorityClassName"] == "plnt-critical"
    assert spec["topologySpreadConstraints"] == POD_FIELDS["topologySpreadConstraints"]
    assert spec["tolerations"] == POD_FIELDS["tolerations"]
    assert spec["affinity"] == POD_FIELDS["affinity"]
    assert spec["nodeSelector"] == POD_FIELDS["nodeSelector"]
    assert template["metadata"]["annotations"]["team"] == "platform"
    assert template["metadata"]["labels"]["cost-center"] == "ml"
    assert container["resources"] == POD_FIELDS["resources"]
    # merged over the shared contexts: the service's keys win, the hardening stays
    assert container["securityContext"]["runAsUser"] == 20002
    assert (
        container["securityContext"]["seccompProfile"]
        == POD_FIELDS["securityContext"]["seccompProfile"]
    )
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    assert spec["securityContext"]["runAsUser"] == 20002
    assert spec["securityContext"]["runAsNonRoot"] is True
    for doc in docs:
        validate_any(doc)


def test_a_shared_priority_class_applies_where_a_service_has_none() -> None:
    values = {"priorityClassName": "plnt-cp", "router": {"priorityClassName": "plnt-edge"}}
    classes = {
        s: d["spec"]["template"]["spec"]["priorityClassName"]
        for s, d in _deployments(_render(values)).items()
    }
    assert classes == {**dict.fromkeys(SERVICES, "plnt-cp"), "router": "plnt-edge"}


@pytest.mark.parametrize("service", SERVICES)
def test_a_typo_in_any_services_pod_fields_is_refused(service: str) -> None:
    with pytest.raises(helm_python.HelmValuesError, match="priorityClass"):
        _render({service: {"priorityClass": "plnt-critical"}})


@pytest.mark.parametrize(
    "values",
    [
        {"watcher": {"priorityClass": "x"}},
        {"router": {"topologySpreadConstraint": []}},
        {"smoke": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "h"}]}},
        {"router": {"auth": "basic"}},
        {"networkPolicy": {"enable": False}},
        {"networkPolicy": {"kubeApi": {"cidrs": ["10.0.0.1"]}}},
        {"topologySpread": {"whenUnsatisfiable": "Sometimes"}},
    ],
    ids=[
        "priority-typo",
        "spread-typo",
        "spread-without-when",
        "auth-mode",
        "network-policy-typo",
        "cidr-without-prefix",
        "spread-when",
    ],
)
def test_the_schema_refuses_typos_and_bad_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmValuesError):
        _render(values)
