"""The chart's NATS: a 3-node JetStream cluster on PVCs, one node per Kubernetes node, and
a control plane that keeps 3 replicas of every stream and bucket (rendered with real Helm)."""

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from plnt_chart_kit import PLNT_CHART, container_env, one, render, select, with_router_keys

NAMESPACE = "plnt-system"
SERVICES = ("watcher", "puller", "installer", "smoke", "promoter", "router")


def nats_values_given(tmp_path: Path, values: dict[str, Any]) -> dict[str, Any]:
    """The values Helm hands the NATS dependency: a stand-in chart (the official one is
    fetched by `helm dependency update`) renders what it receives into a ConfigMap."""
    chart = tmp_path / "plnt"
    shutil.copytree(PLNT_CHART, chart)
    stub = chart / "charts" / "nats"
    (stub / "templates").mkdir(parents=True)
    (stub / "Chart.yaml").write_text("apiVersion: v2\nname: nats\nversion: 1.3.0\n")
    (stub / "templates" / "values.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nats-values\n"
        "data:\n  values: {{ toJson .Values | quote }}\n"
    )
    docs = render(chart, with_router_keys(values), namespace=NAMESPACE)
    given: dict[str, Any] = json.loads(one(docs, "ConfigMap", "nats-values")["data"]["values"])
    return given


def service_env(docs: list[dict[str, Any]], service: str) -> dict[str, Any]:
    (deployment,) = [
        doc
        for doc in select(docs, "Deployment")
        if doc["metadata"]["labels"]["app.kubernetes.io/component"] == service
    ]
    return container_env(deployment)


def test_the_nats_dependency_runs_three_clustered_nodes_on_file_store_pvcs(
    tmp_path: Path,
) -> None:
    nats = nats_values_given(tmp_path, {"nats": {"enabled": True}})
    assert nats["config"]["cluster"] == {"enabled": True, "replicas": 3}
    jetstream = nats["config"]["jetstream"]
    assert jetstream["enabled"] is True
    assert jetstream["fileStore"]["enabled"] is True
    assert jetstream["fileStore"]["pvc"]["enabled"] is True
    assert jetstream["merge"]["sync_interval"] == "always"


def test_the_nats_nodes_are_spread_one_per_kubernetes_node(tmp_path: Path) -> None:
    nats = nats_values_given(tmp_path, {"nats": {"enabled": True}})
    spread = nats["podTemplate"]["topologySpreadConstraints"]
    assert spread == {
        "kubernetes.io/hostname": {"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}
    }


@pytest.mark.parametrize(
    ("values", "replicas"),
    [({}, "3"), ({"natsReplicas": 1}, "1")],
    ids=["default-three", "single-server-one"],
)
def test_every_service_keeps_the_replica_count_of_the_values(
    values: dict[str, Any], replicas: str
) -> None:
    docs = render(PLNT_CHART, with_router_keys(values), namespace=NAMESPACE)
    for service in SERVICES:
        assert service_env(docs, service)["PLNT_NATS_REPLICAS"] == replicas, service


def test_a_replica_count_no_nats_cluster_holds_is_refused_by_the_schema() -> None:
    with pytest.raises(Exception, match="natsReplicas"):
        render(PLNT_CHART, {"natsReplicas": 7}, namespace=NAMESPACE)
