"""The console on Kubernetes in the chart: PLNT_CONSOLE_SOURCE=kubernetes, a service account
with get, list and patch on workflowruns.plnt.work scoped as the watcher's (a ClusterRole,
or a Role in watcher.kubeNamespace), its token mounted, the API server in its egress;
console.source=embedded leaves all of that out, and a console that is off gets no RBAC."""

from typing import Any

import helm_python
import pytest
from plnt_chart_kit import (
    PLNT_CHART,
    container_env,
    one,
    render,
    select,
    settings_env_names,
    validate_manifest,
    with_router_keys,
)

from plnt_console.settings import ConsoleSettings

NS = "plnt-system"
CONSOLE = "plnt-console"
ENABLED = {"console": {"enabled": True, "tokenSecret": {"name": "console-token"}}}
RUN_RULE = {
    "apiGroups": ["plnt.work"],
    "resources": ["workflowruns"],
    "verbs": ["get", "list", "patch"],
}


def _render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return render(PLNT_CHART, with_router_keys(values), release="plnt", namespace=NS)


def _console_rbac(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kinds = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
    return [
        doc
        for kind in kinds
        for doc in select(docs, kind)
        if doc["metadata"]["labels"].get("app.kubernetes.io/component") == "console"
    ]


def test_the_console_runs_in_kubernetes_mode_with_its_token_mounted() -> None:
    docs = _render(ENABLED)
    deployment = one(docs, "Deployment", CONSOLE)
    env = container_env(deployment)
    assert env["PLNT_CONSOLE_SOURCE"] == "kubernetes"
    assert env["PLNT_CONSOLE_KUBE_REQUEST_TIMEOUT_S"] == "30"
    # the variables are the console's settings and parse as such
    names = settings_env_names(ConsoleSettings)
    values = {names[k]: v for k, v in env.items() if k in names and isinstance(v, str)}
    settings = ConsoleSettings.model_validate({**values, "token": "t"})
    assert (settings.source, settings.kube_request_timeout_s) == ("kubernetes", 30.0)
    assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    assert one(docs, "ServiceAccount", CONSOLE)["automountServiceAccountToken"] is True


def test_a_cluster_role_lets_the_console_get_list_and_patch_workflowruns_only() -> None:
    docs = _render(ENABLED)
    role = one(docs, "ClusterRole", CONSOLE)
    validate_manifest(role)
    assert role["rules"] == [RUN_RULE]
    binding = one(docs, "ClusterRoleBinding", CONSOLE)
    validate_manifest(binding)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": CONSOLE,
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": CONSOLE, "namespace": NS}]


def test_a_watcher_limited_to_one_namespace_limits_the_console_to_a_role_there() -> None:
    docs = _render({**ENABLED, "watcher": {"kubeNamespace": "agents"}})
    assert select(docs, "ClusterRole", CONSOLE) == []
    role = one(docs, "Role", f"{CONSOLE}-runs")
    assert (role["metadata"]["namespace"], role["rules"]) == ("agents", [RUN_RULE])
    binding = one(docs, "RoleBinding", f"{CONSOLE}-runs")
    assert binding["metadata"]["namespace"] == "agents"
    assert binding["roleRef"]["kind"] == "Role"
    assert binding["subjects"][0]["namespace"] == NS


def test_the_network_policy_lets_the_console_reach_the_api_server_as_the_watcher() -> None:
    docs = _render({**ENABLED, "networkPolicy": {"enabled": True}})
    console = one(docs, "NetworkPolicy", CONSOLE)
    watcher = one(docs, "NetworkPolicy", "plnt-watcher")
    api_rules = [
        r for r in watcher["spec"]["egress"] if {"port": 443, "protocol": "TCP"} in r["ports"]
    ]
    assert api_rules and api_rules[0] in console["spec"]["egress"]


@pytest.mark.parametrize(
    "values",
    [
        {**ENABLED, "console": {**ENABLED["console"], "source": "embedded"}},
        {"console": {"enabled": False}},
    ],
    ids=["embedded-source", "console-off"],
)
def test_without_the_kubernetes_source_the_console_gets_no_rbac_token_or_api_egress(
    values: dict[str, Any],
) -> None:
    docs = _render({**values, "networkPolicy": {"enabled": True}})
    assert _console_rbac(docs) == []
    if values["console"]["enabled"]:
        deployment = one(docs, "Deployment", CONSOLE)
        assert container_env(deployment)["PLNT_CONSOLE_SOURCE"] == "embedded"
        assert "PLNT_CONSOLE_KUBE_REQUEST_TIMEOUT_S" not in container_env(deployment)
        assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
        ports = {
            p["port"]
            for r in one(docs, "NetworkPolicy", CONSOLE)["spec"]["egress"]
            for p in r["ports"]
        }
        assert 443 not in ports


def test_the_schema_refuses_an_unknown_console_source() -> None:
    with pytest.raises(helm_python.HelmValuesError):
        _render({"console": {**ENABLED["console"], "source": "etcd"}})
