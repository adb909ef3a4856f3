"""charts/plnt (the control plane) rendered with real Helm for several value sets: every
manifest is valid Kubernetes (strict); one Deployment per service running `plnt serve`;
values map one to one onto each service's settings (checked against the settings classes
themselves); least-privilege RBAC; NATS external or as the official chart dependency."""

import shutil
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from plnt_chart_kit import (
    PLNT_CHART,
    RUNNER_CHART,
    container_env,
    load_chart,
    one,
    render,
    select,
    settings_env_names,
    validate_manifest,
    with_router_keys,
)
from pydantic_settings import BaseSettings
from test_charts_runner import SCENARIOS as RUNNER_SCENARIOS

from plnt_common.settings import CommonSettings
from plnt_installer.settings import InstallerSettings
from plnt_promoter.settings import PromoterSettings
from plnt_puller.settings import PullerSettings
from plnt_router.settings import RouterSettings
from plnt_smoke.settings import SmokeSettings
from plnt_watcher.settings import WatcherSettings

SETTINGS: dict[str, type[BaseSettings]] = {
    "watcher": WatcherSettings,
    "puller": PullerSettings,
    "installer": InstallerSettings,
    "smoke": SmokeSettings,
    "promoter": PromoterSettings,
    "router": RouterSettings,
}
# Variables the chart sets that are not plnt settings, per service.
OTHER_ENV = {"installer": {"HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"}}
# DESIGN section 15's names, read by every service (NATS) and the router (auth), set only
# when configured (one NATS auth mode at a time), whether or not a settings class has them
# yet: tests/charts/test_charts_production.py checks each mode.
CONTRACT_ENV = {
    "PLNT_NATS_CREDS",
    "PLNT_NATS_USER",
    "PLNT_NATS_PASSWORD",
    "PLNT_NATS_TOKEN",
    "PLNT_NATS_TLS_CA",
    "PLNT_NATS_TLS_CERT",
    "PLNT_NATS_TLS_KEY",
    "PLNT_ROUTER_AUTH",
}
# Their settings fields (on CommonSettings), from Secrets and mounted files, never values.
CONTRACT_FIELDS = {
    "nats_creds",
    "nats_user",
    "nats_password",
    "nats_token",
    "nats_tls_ca",
    "nats_tls_cert",
    "nats_tls_key",
}
# Where the chart's default deliberately differs from the service's own default.
CHART_DEFAULTS: dict[tuple[str, str], Any] = {
    ("watcher", "source"): "kubernetes",  # the CRDs, not the embedded store
    ("watcher", "leaseNamespace"): "",  # rendered as the release namespace
    ("router", "host"): "0.0.0.0",  # reachable through the Service
    ("installer", "runnerChart"): "/opt/plnt/charts/plnt-runner",  # where the image puts it
    ("puller", "backends"): "kubernetes",  # PlntBackends from the CRD, not the embedded store
    ("installer", "backends"): "kubernetes",  # likewise
    ("router", "auth"): "keys",  # a shared cluster: calls need a key (`plnt up`: none)
    # every service has a metrics port: its probes' /healthz and /readyz are served there
    **{(s, "metricsPort"): 9090 for s in SETTINGS},
}
# Read by every service without a service prefix; set from top-level values.
UNPREFIXED = {
    "nats_url",
    "nats_replicas",
    "log_level",
    "log_format",
    "router_public_url",
    # the bus's: top-level natsPingInterval, natsMaxOutstandingPings and retention.*
    "nats_ping_interval",
    "nats_max_outstanding_pings",
    "events_max_age",
    "events_max_bytes",
    "buckets_max_bytes",
    "shadow_max_bytes",
    "sagas_max_age",
}

NAMESPACE = "plnt-system"
EXTERNAL_NATS = "nats://nats.messaging.svc.cluster.local:4222"

SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "nats-external-url": {"externalNatsUrl": EXTERNAL_NATS},
    "overrides": {
        "logLevel": "debug",
        "events": {"maxAge": "90d", "maxBytes": "8GiB"},
        "buckets": {"maxBytes": "1GiB"},
        "shadow": {"maxBytes": "2GiB"},
        "sagas": {"maxAge": "90d"},
        "routerPublicUrl": "https://agents.example.com/",
        "watcher": {"replicaCount": 2, "deadlinePullingS": 90},
        "puller": {
            "replicaCount": 3,
            "s3EndpointUrl": "http://minio.minio:9000",
            "s3MaxAttempts": 5,
            "retryBackoffS": [1, 5, 30],
            "awsCredentialsSecret": "s3-credentials",
            "kubeconfig": "/etc/plnt/kubeconfig",
        },
        "installer": {
            "replicaCount": 2,
            "backends": "embedded",
            "targetNamespaces": ["agents", "agents-gpu"],
            "backendSecrets": [{"names": ["remote-kubeconfig", "openai"]}],
            "keda": True,
            "readyTimeoutS": 600,
        },
        "smoke": {"concurrency": 8, "requestTimeoutS": 12.5},
        "promoter": {"replicaCount": 2},
        "router": {
            "replicaCount": 4,
            "port": 9090,
            "metricsPort": 9091,
            "service": {"port": 80},
            "apiKeysSecret": {"name": "router-api-keys"},
            "maxInFlight": 512,
        },
    },
    "rbac-fullname-override": {"fullnameOverride": "plnt-cp"},
}
SERVICES = list(SETTINGS)


def _render(values: dict[str, Any], release: str = "plnt", **kwargs: Any) -> list[dict[str, Any]]:
    # router.auth defaults to keys, which needs the keys Secret.
    return render(
        PLNT_CHART, with_router_keys(values), release=release, namespace=NAMESPACE, **kwargs
    )


def _deployment(docs: list[dict[str, Any]], service: str) -> dict[str, Any]:
    (found,) = [
        doc
        for doc in select(docs, "Deployment")
        if doc["metadata"]["labels"]["app.kubernetes.io/component"] == service
    ]
    return found


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_rendered_manifest_is_valid_kubernetes(name: str) -> None:
    docs = _render(SCENARIOS[name])
    assert docs
    for doc in docs:
        validate_manifest(doc)


def test_one_deployment_per_service_and_no_local_backend() -> None:
    docs = _render({})
    deployments = select(docs, "Deployment")
    assert sorted(d["metadata"]["name"] for d in deployments) == sorted(
        f"plnt-{s}" for s in SERVICES
    )
    for service in SERVICES:
        container = _deployment(docs, service)["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == ["plnt", "serve", service]
        assert container["image"] == "plnt:0.1.0"
    assert not [d for d in docs if "local-backend" in d["metadata"]["name"]]


def test_replica_counts_are_per_service() -> None:
    docs = _render(SCENARIOS["overrides"])
    replicas = {s: _deployment(docs, s)["spec"]["replicas"] for s in SERVICES}
    assert replicas == {
        "watcher": 2,
        "puller": 3,
        "installer": 2,
        "smoke": 1,
        "promoter": 2,
        "router": 4,
    }


def test_a_service_can_be_switched_off() -> None:
    docs = _render({"smoke": {"enabled": False}})
    assert [d for d in select(docs, "Deployment") if d["metadata"]["name"] == "plnt-smoke"] == []
    assert [
        d for d in select(docs, "ServiceAccount") if d["metadata"]["name"] == "plnt-smoke"
    ] == []


@pytest.mark.parametrize("scenario", ["defaults", "overrides"])
@pytest.mark.parametrize("service", SERVICES)
def test_every_env_var_maps_onto_a_field_of_the_service_settings(
    scenario: str, service: str
) -> None:
    env = container_env(_deployment(_render(SCENARIOS[scenario]), service))
    known = settings_env_names(SETTINGS[service])
    unknown = sorted(set(env) - set(known) - OTHER_ENV.get(service, set()) - CONTRACT_ENV)
    assert unknown == [], f"{service} does not read {unknown}"


@pytest.mark.parametrize("service", SERVICES)
def test_every_setting_of_a_service_can_be_set_from_values(service: str) -> None:
    env = container_env(_deployment(_render(SCENARIOS["overrides"]), service))
    missing = sorted(set(settings_env_names(SETTINGS[service])) - set(env) - CONTRACT_ENV)
    assert missing == [], f"{service} settings the chart cannot set: {missing}"


@pytest.mark.parametrize("service", SERVICES)
def test_rendered_env_parses_into_the_settings_the_values_asked_for(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = _render(SCENARIOS["overrides"])
    env = container_env(_deployment(docs, service))
    for name in settings_env_names(SETTINGS[service]):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value if isinstance(value, str) else '{"default": "from-secret"}')
    settings: Any = SETTINGS[service]()
    assert settings.nats_url == "nats://nats:4222"
    assert settings.log_level == "debug"
    assert settings.router_public_url == "https://agents.example.com"
    expected = {
        "watcher": {"source": "kubernetes", "deadline_pulling_s": 90.0},
        "puller": {
            "s3_endpoint_url": "http://minio.minio:9000",
            "s3_max_attempts": 5,
            "retry_backoff_s": (1.0, 5.0, 30.0),
            "backends": "kubernetes",
            "kubeconfig": "/etc/plnt/kubeconfig",
        },
        "installer": {
            "ready_timeout_s": 600.0,
            "concurrency": 16,
            "backends": "embedded",
            "kubeconfig": "",
        },
        "smoke": {"concurrency": 8, "request_timeout_s": 12.5},
        "promoter": {"concurrency": 16},
        "router": {"host": "0.0.0.0", "port": 9090, "max_in_flight": 512},
    }[service]
    assert {key: getattr(settings, key) for key in expected} == expected


def _camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(part.capitalize() for part in rest)


@pytest.mark.parametrize("service", SERVICES)
def test_chart_defaults_are_the_service_defaults(service: str) -> None:
    values = load_chart(PLNT_CHART).values[service]
    settings_class = SETTINGS[service]
    assert set(CommonSettings.model_fields) >= UNPREFIXED
    for field_name, field in settings_class.model_fields.items():
        if field_name in UNPREFIXED | CONTRACT_FIELDS or field_name == "api_keys":  # Secrets
            continue
        key = _camel(field_name)
        assert key in values, f"{service}.{key} is missing from values.yaml"
        default = field.get_default(call_default_factory=True)
        if isinstance(default, tuple):
            default = list(default)
        expected = CHART_DEFAULTS.get((service, key), default)
        assert values[key] == expected, f"{service}.{key}"


def test_watcher_reads_workflowruns_from_kubernetes_by_default() -> None:
    env = container_env(_deployment(_render({}), "watcher"))
    assert env["PLNT_WATCHER_SOURCE"] == "kubernetes"


def test_puller_and_installer_read_plntbackends_from_kubernetes_in_cluster_by_default() -> None:
    docs = _render({})
    for service in ("puller", "installer"):
        env = container_env(_deployment(docs, service))
        prefix = f"PLNT_{service.upper()}_"
        assert env[f"{prefix}BACKENDS"] == "kubernetes"
        assert env[f"{prefix}KUBECONFIG"] == ""  # standard resolution: the service account


def test_router_is_reachable_through_its_service_with_probes() -> None:
    docs = _render(SCENARIOS["overrides"])
    router = _deployment(docs, "router")
    container = router["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"] == [
        {"name": "http", "containerPort": 9090, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9091, "protocol": "TCP"},
    ]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    service = one(docs, "Service")
    assert service["metadata"]["name"] == "plnt-router"
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}
    ]
    assert (
        service["spec"]["selector"].items()
        <= router["spec"]["template"]["metadata"]["labels"].items()
    )
    env = container_env(router)
    assert env["PLNT_ROUTER_API_KEYS"] == {
        "secretKeyRef": {"name": "router-api-keys", "key": "api-keys.json"}
    }
    pdb = one(docs, "PodDisruptionBudget", "plnt-router")
    assert pdb["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]


def test_watcher_lease_lives_in_the_release_namespace_where_its_role_is() -> None:
    docs = _render({})
    env = container_env(_deployment(docs, "watcher"))
    assert env["PLNT_WATCHER_LEASE_NAMESPACE"] == NAMESPACE
    assert one(docs, "Role", "plnt-watcher")["metadata"]["namespace"] == NAMESPACE
    pinned = container_env(_deployment(_render({"watcher": {"leaseNamespace": "ops"}}), "watcher"))
    assert pinned["PLNT_WATCHER_LEASE_NAMESPACE"] == "ops"


def test_watching_one_namespace_needs_only_a_role_there() -> None:
    docs = _render({"watcher": {"kubeNamespace": "agents"}})
    assert [d for d in select(docs, "ClusterRole") if "watcher" in d["metadata"]["name"]] == []
    role = one(docs, "Role", "plnt-watcher-runs")
    assert role["metadata"]["namespace"] == "agents"
    assert _rules(role)[0][0] == ("plnt.work",)
    binding = one(docs, "RoleBinding", "plnt-watcher-runs")
    assert binding["metadata"]["namespace"] == "agents"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "plnt-watcher-runs",
    }
    assert container_env(_deployment(docs, "watcher"))["PLNT_WATCHER_KUBE_NAMESPACE"] == "agents"
    for doc in docs:
        validate_manifest(doc)


@pytest.mark.parametrize("service", SERVICES)
def test_prometheus_scrapes_every_service(service: str) -> None:
    deployment = _deployment(_render({}), service)
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    port = "9090"  # the router's too: /metrics is off its public port
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == port
    assert annotations["prometheus.io/path"] == "/metrics"
    ports = {
        p["containerPort"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    assert int(port) in ports
    assert container_env(deployment)[f"PLNT_{service.upper()}_METRICS_PORT"] == "9090"


def test_router_public_url_defaults_to_the_router_service() -> None:
    env = container_env(_deployment(_render({}), "promoter"))
    assert env["PLNT_ROUTER_PUBLIC_URL"] == "http://plnt-router.plnt-system.svc.cluster.local:8080"


def test_puller_gets_s3_credentials_from_a_secret() -> None:
    container = _deployment(_render(SCENARIOS["overrides"]), "puller")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["envFrom"] == [{"secretRef": {"name": "s3-credentials"}}]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_service_runs_non_root_read_only_without_capabilities(name: str) -> None:
    docs = _render(SCENARIOS[name])
    for service in SERVICES:
        pod = _deployment(docs, service)["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        context = pod["containers"][0]["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert pod["serviceAccountName"] == f"{docs_prefix(name)}-{service}"


def docs_prefix(scenario: str) -> str:
    return "plnt-cp" if scenario == "rbac-fullname-override" else "plnt"


# ---- NATS --------------------------------------------------------------------------------


def test_external_nats_url_reaches_every_service() -> None:
    docs = _render(SCENARIOS["nats-external-url"])
    for service in SERVICES:
        assert container_env(_deployment(docs, service))["PLNT_NATS_URL"] == EXTERNAL_NATS


def test_nats_dependency_is_the_official_chart_behind_a_condition() -> None:
    chart = yaml.safe_load((PLNT_CHART / "Chart.yaml").read_text())
    (dependency,) = chart["dependencies"]
    assert dependency["name"] == "nats"
    assert dependency["repository"] == "https://nats-io.github.io/k8s/helm/charts/"
    assert dependency["condition"] == "nats.enabled"
    values = load_chart(PLNT_CHART).values["nats"]
    assert values["enabled"] is False
    assert values["config"]["jetstream"]["enabled"] is True
    assert values["config"]["jetstream"]["fileStore"]["enabled"] is True
    assert values["config"]["jetstream"]["merge"]["sync_interval"] == "always"


@pytest.mark.parametrize(
    ("release", "nats_service"),
    [("plnt", "plnt-nats"), ("nats-plnt", "nats-plnt")],
    ids=["release-plnt", "release-containing-nats"],
)
def test_with_the_nats_dependency_services_use_its_client_service(
    tmp_path: Path, release: str, nats_service: str
) -> None:
    # A stand-in for the fetched official chart: `helm dependency update` would put the
    # real one in charts/plnt/charts/; its Service is named like the stand-in's fullname.
    chart = tmp_path / "plnt"
    shutil.copytree(PLNT_CHART, chart)
    stub = chart / "charts" / "nats"
    stub.mkdir(parents=True)
    (stub / "Chart.yaml").write_text("apiVersion: v2\nname: nats\nversion: 1.3.0\n")
    docs = render(
        chart, with_router_keys({"nats": {"enabled": True}}), release=release, namespace=NAMESPACE
    )
    url = f"nats://{nats_service}.{NAMESPACE}.svc.cluster.local:4222"
    for service in SERVICES:
        assert container_env(_deployment(docs, service))["PLNT_NATS_URL"] == url


def test_enabling_nats_without_fetching_the_dependency_says_what_to_run() -> None:
    with pytest.raises(helm_python.HelmRenderError, match="helm dependency update"):
        _render({"nats": {"enabled": True}})


def test_no_nats_url_at_all_is_refused() -> None:
    with pytest.raises(helm_python.HelmError, match="externalNatsUrl"):
        _render({"externalNatsUrl": ""})


# ---- RBAC ----------------------------------------------------------------------------------


def _rules(doc: dict[str, Any]) -> list[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
    return [
        (tuple(rule["apiGroups"]), tuple(rule["resources"]), tuple(rule["verbs"]))
        for rule in doc["rules"]
    ]


def _bound_service_accounts(docs: list[dict[str, Any]]) -> set[str]:
    return {
        subject["name"]
        for doc in docs
        if doc["kind"] in {"RoleBinding", "ClusterRoleBinding"}
        for subject in doc["subjects"]
    }


def test_watcher_may_manage_workflowruns_events_and_its_lease_only() -> None:
    docs = _render({})
    cluster_role = one(docs, "ClusterRole", "plnt-watcher")
    assert _rules(cluster_role) == [
        (("plnt.work",), ("workflowruns",), ("get", "list", "watch", "patch", "update")),
        (
            ("plnt.work",),
            ("workflowruns/status", "workflowruns/finalizers"),
            ("get", "patch", "update"),
        ),
        (("",), ("events",), ("create", "patch")),
        (("events.k8s.io",), ("events",), ("create", "patch")),
    ]
    role = one(docs, "Role", "plnt-watcher")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert _rules(role) == [(("coordination.k8s.io",), ("leases",), ("get", "create", "update"))]


def test_puller_may_only_read_backends_and_get_pull_secrets_in_the_release_namespace() -> None:
    docs = _render({})
    assert _rules(one(docs, "ClusterRole", "plnt-puller")) == [
        (("plnt.work",), ("plntbackends",), ("get", "list", "watch")),
        (("",), ("namespaces",), ("get",)),  # their labels, for allowedNamespaces
    ]
    roles = [d for d in select(docs, "Role") if "puller" in d["metadata"]["name"]]
    assert [(d["metadata"]["name"], d["metadata"]["namespace"]) for d in roles] == [
        ("plnt-puller-pull-secrets", NAMESPACE)
    ]
    assert _rules(roles[0]) == [(("",), ("secrets",), ("get",))]
    binding = one(docs, "RoleBinding", "plnt-puller-pull-secrets")
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"]["name"] == "plnt-puller-pull-secrets"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "plnt-puller", "namespace": NAMESPACE}
    ]


@pytest.mark.parametrize(
    ("values", "namespaces"),
    [
        (
            {"puller": {"pullSecretNamespaces": ["agents", "team-b", "agents"]}},
            ["agents", "team-b"],
        ),
        ({"watcher": {"kubeNamespace": "agents"}}, ["agents"]),
    ],
    ids=["listed-namespaces", "the-watched-namespace"],
)
def test_puller_gets_pull_secrets_only_in_the_namespaces_whose_runs_may_name_them(
    values: dict[str, Any], namespaces: list[str]
) -> None:
    docs = _render(values)
    roles = [d for d in select(docs, "Role") if d["metadata"]["name"] == "plnt-puller-pull-secrets"]
    assert [d["metadata"]["namespace"] for d in roles] == namespaces
    assert all(_rules(d) == [(("",), ("secrets",), ("get",))] for d in roles)
    bindings = [
        d
        for d in select(docs, "RoleBinding")
        if d["metadata"]["name"] == "plnt-puller-pull-secrets"
    ]
    assert [d["metadata"]["namespace"] for d in bindings] == namespaces


def test_installer_may_read_backends_nodes_and_pods_cluster_wide_and_nothing_else() -> None:
    docs = _render({})
    assert _rules(one(docs, "ClusterRole", "plnt-installer")) == [
        (("plnt.work",), ("plntbackends",), ("get", "list")),
        (("plnt.work",), ("plntbackends/status",), ("patch",)),
        (("",), ("nodes", "pods"), ("list",)),
    ]
    binding = one(docs, "ClusterRoleBinding", "plnt-installer")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "plnt-installer",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "plnt-installer", "namespace": NAMESPACE}
    ]


def test_installer_gets_helm_permissions_in_each_target_namespace() -> None:
    docs = _render(SCENARIOS["overrides"])
    roles = [d for d in select(docs, "Role") if d["metadata"]["name"] == "plnt-installer"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["agents", "agents-gpu"]
    granted = {
        resource for r in roles[:1] for _, resources, _ in _rules(r) for resource in resources
    }
    assert {
        "deployments",
        "services",
        "configmaps",
        "horizontalpodautoscalers",
        "poddisruptionbudgets",
        "secrets",
        "scaledobjects",
    } <= granted
    bindings = [d for d in select(docs, "RoleBinding") if d["metadata"]["name"] == "plnt-installer"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["agents", "agents-gpu"]
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "plnt-installer", "namespace": NAMESPACE}
        ]
    default_roles = [
        d for d in select(_render({}), "Role") if d["metadata"]["name"] == "plnt-installer"
    ]
    assert [r["metadata"]["namespace"] for r in default_roles] == [NAMESPACE]
    assert "scaledobjects" not in {
        res for _, resources, _ in _rules(default_roles[0]) for res in resources
    }


HELM_VERBS = {"get", "list", "create", "update", "patch", "delete"}


def _api_resource(doc: dict[str, Any]) -> tuple[str, str]:
    """(API group, resource) of a manifest, as RBAC names them."""
    group = doc["apiVersion"].rpartition("/")[0]
    kind = doc["kind"].lower()
    return group, kind[:-1] + "ies" if kind.endswith("y") else kind + "s"


def test_installer_may_manage_every_object_a_runner_release_renders() -> None:
    runner_docs = [
        doc
        for values in [*RUNNER_SCENARIOS.values(), {"service": {"export": True}}]
        for doc in render(RUNNER_CHART, values, release="rr-g1", namespace="agents")
    ]
    rendered = {_api_resource(doc) for doc in runner_docs}
    assert ("networking.k8s.io", "networkpolicies") in rendered  # the chart's default
    docs = _render({"installer": {"keda": True, "serviceExports": True}})
    (role,) = [d for d in select(docs, "Role") if d["metadata"]["name"] == "plnt-installer"]
    granted = {
        (group, resource)
        for groups, resources, verbs in _rules(role)
        if set(verbs) >= HELM_VERBS
        for group in groups
        for resource in resources
    }
    assert rendered - granted == set()


def test_installer_may_only_get_the_backend_secrets_it_is_given() -> None:
    docs = _render(SCENARIOS["overrides"])
    role = one(docs, "Role", "plnt-installer-secrets-0")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["remote-kubeconfig", "openai"],
            "verbs": ["get"],
        }
    ]
    binding = one(docs, "RoleBinding", "plnt-installer-secrets-0")
    assert binding["roleRef"]["name"] == "plnt-installer-secrets-0"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_smoke_promoter_and_router_have_no_api_access(name: str) -> None:
    docs = _render(SCENARIOS[name])
    prefix = docs_prefix(name)
    bound = _bound_service_accounts(docs)
    for service in ("smoke", "promoter", "router"):
        assert f"{prefix}-{service}" not in bound
        assert (
            one(docs, "ServiceAccount", f"{prefix}-{service}")["automountServiceAccountToken"]
            is False
        )
        pod = _deployment(docs, service)["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
    assert bound == {f"{prefix}-watcher", f"{prefix}-puller", f"{prefix}-installer"}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_no_wildcards_and_no_cluster_wide_secrets(name: str) -> None:
    docs = _render(SCENARIOS[name])
    for doc in select(docs, "ClusterRole") + select(docs, "Role"):
        for groups, resources, verbs in _rules(doc):
            assert "*" not in groups + resources + verbs, doc["metadata"]["name"]
        if doc["kind"] == "ClusterRole":
            assert all("secrets" not in resources for _, resources, _ in _rules(doc))


@pytest.mark.parametrize(
    ("release", "values", "prefix"),
    [
        ("plnt", {}, "plnt"),
        ("acme", {}, "acme-plnt"),
        ("plnt-prod", {}, "plnt-prod"),
        ("plnt", {"fullnameOverride": "plnt-cp"}, "plnt-cp"),
    ],
    ids=["release-plnt", "release-acme", "release-containing-plnt", "fullname-override"],
)
def test_rbac_names_follow_the_release_and_bind_existing_service_accounts(
    release: str, values: dict[str, Any], prefix: str
) -> None:
    docs = _render(values, release=release)
    accounts = {d["metadata"]["name"] for d in select(docs, "ServiceAccount")}
    assert accounts == {f"{prefix}-{s}" for s in SERVICES}
    for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
        for doc in select(docs, kind):
            assert doc["metadata"]["name"].startswith(f"{prefix}-"), doc["metadata"]["name"]
    for binding in select(docs, "ClusterRoleBinding") + select(docs, "RoleBinding"):
        role_kind = binding["roleRef"]["kind"]
        assert select(docs, role_kind, binding["roleRef"]["name"]), binding["metadata"]["name"]
        for subject in binding["subjects"]:
            assert subject["name"] in accounts
            assert subject["namespace"] == NAMESPACE


# ---- chart hygiene ---------------------------------------------------------------------------


def test_chart_ships_no_crds_for_helm_to_leave_stale() -> None:
    assert not load_chart(PLNT_CHART).crds


@pytest.mark.parametrize(
    "values",
    [
        {"puller": {"s3Endpoint": "http://minio:9000"}},
        {"watcher": {"source": "etcd"}},
        {"puller": {"backends": "etcd"}},
        {"router": {"port": 70000}},
        {"smoke": {"concurrency": 0}},
        {"installer": {"targetNamespaces": ["Not_A_Namespace"]}},
    ],
    ids=["typo", "source", "backends", "port", "concurrency", "namespace"],
)
def test_values_schema_rejects_bad_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmValuesError):
        _render(values)


def test_helm_lint_has_no_errors_and_only_the_missing_nats_dependency_warning() -> None:
    report = helm_python.lint(PLNT_CHART)
    assert report["errors"] == []
    warnings = [m["error"] for m in report["messages"] if m["severity"] >= 2]
    assert warnings == ["chart directory is missing these dependencies: nats"]
