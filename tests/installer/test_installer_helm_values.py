"""The values the Helm backend passes, checked against the real ``charts/plnt-runner``.

Rendering uses helm-python-sdk (Helm's template engine, no binary), which also enforces
the chart's ``values.schema.json``: a key the chart does not know fails here, not in a
cluster.
"""

from typing import Any

import helm_python
import pytest
import yaml
from installer_helm_support import (
    CHART,
    HELM_NS,
    IN_CLUSTER,
    RELEASE,
    RUN_NS,
    SPEC,
    desired,
    in_cluster_backend,
    promoted,
    spec_pulled,
)

from plnt_common.errors import BackendUnavailable
from plnt_common.releases import LlmConfig, ReleaseRole
from plnt_common.resources import CLUSTER_DOMAIN, PlntBackendSpec
from plnt_installer.adapters.helm_values import (
    RUNNER_SERVICE_PORT,
    chart_values,
    desired_from_values,
    placement_of,
    release_url,
    with_role,
)


def _render(values: dict[str, Any], *, is_install: bool = True) -> list[dict[str, Any]]:
    files = helm_python.Chart.load(CHART).render(
        values, name=RELEASE, namespace=HELM_NS, is_install=is_install, is_upgrade=not is_install
    )
    docs: list[dict[str, Any]] = []
    for template, text in sorted(files.items()):
        if not template.endswith("NOTES.txt"):
            docs.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return docs


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [doc for doc in docs if doc["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}s"
    return found[0]


def _values(role: ReleaseRole = ReleaseRole.CANARY) -> dict[str, Any]:
    pulled = spec_pulled()
    release = desired(pulled).model_copy(update={"role": role})
    return chart_values(
        release=release,
        workflow=SPEC,
        backend_name=IN_CLUSTER,
        backend=pulled.backend,
        placement=placement_of(pulled.run),
    )


def test_values_pass_the_chart_schema_and_name_what_readiness_and_the_router_use() -> None:
    docs = _render(_values())

    deployment = _one(docs, "Deployment")
    service = _one(docs, "Service")
    assert deployment["metadata"]["name"] == RELEASE  # what wait_ready polls
    assert service["metadata"]["name"] == RELEASE
    assert service["spec"]["ports"][0]["port"] == RUNNER_SERVICE_PORT
    url = release_url(name=RELEASE, namespace=HELM_NS, values=_values(), domain=CLUSTER_DOMAIN)
    assert url == f"http://{RELEASE}.{HELM_NS}.svc.cluster.local:{RUNNER_SERVICE_PORT}"
    assert not [doc for doc in docs if doc["kind"] == "ServiceExport"]
    assert _one(docs, "ConfigMap")["data"]["workflow.yaml"].strip() == SPEC.decode().strip()


def test_a_backend_plnt_reaches_across_clusters_exports_the_service_and_admits_its_callers() -> (
    None
):
    callers = [{"ipBlock": {"cidr": "10.8.0.0/16"}}]
    backend = in_cluster_backend(
        serviceDomain="svc.clusterset.local", serviceExport=True, runnerCallers=callers
    )
    pulled = spec_pulled()
    values = chart_values(
        release=desired(pulled),
        workflow=SPEC,
        backend_name=IN_CLUSTER,
        backend=backend,
        placement=placement_of(pulled.run),
    )
    docs = _render(values)

    export = _one(docs, "ServiceExport")
    service = _one(docs, "Service")
    assert export["metadata"]["name"] == service["metadata"]["name"] == RELEASE
    # the Service keeps its port and identity annotations beside the export
    assert service["spec"]["ports"][0]["port"] == RUNNER_SERVICE_PORT
    assert service["metadata"]["annotations"]["plnt.work/backend"] == IN_CLUSTER
    peers = _one(docs, "NetworkPolicy")["spec"]["ingress"][0]["from"]
    assert peers[1:] == [{"ipBlock": {"cidr": "10.8.0.0/16", "except": []}}]
    # nothing added for a backend without them: installed releases keep their values
    assert "export" not in _values()["service"] and "networkPolicy" not in _values()


def test_values_carry_the_gpu_class_the_run_placement_and_the_workflow_runtime() -> None:
    pod = _one(_render(_values()), "Deployment")["spec"]["template"]["spec"]

    container = pod["containers"][0]
    assert container["image"] == "ghcr.io/microagents/runner:0.4.0"
    assert container["command"] == ["python", "-m", "review_responder"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["resources"]["limits"]["memory"] == "16Gi"  # requirements.memoryGiB
    assert pod["nodeSelector"] == {"pool": "h100", "zone": "a"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PLNT_RUNNER_REVISION"] == "1.2.0-g1"
    assert env["PLNT_RUNNER_LLM_BASE_URL"] == "https://llm.example.com/v1"


def test_run_and_saga_identity_ride_on_the_service_not_on_the_pod_template() -> None:
    docs = _render(_values())

    annotations = _one(docs, "Service")["metadata"]["annotations"]
    assert annotations == {
        "plnt.work/namespace": RUN_NS,
        "plnt.work/saga-id": "default.review-responder.1.1",
        "plnt.work/workflow": "review-responder",
        "plnt.work/gpu-class": "h100",
        "plnt.work/backend": IN_CLUSTER,
    }
    template = _one(docs, "Deployment")["spec"]["template"]["metadata"]
    assert not any(key.startswith("plnt.work/") for key in template.get("annotations", {}))


def test_desired_release_reads_back_from_the_values_it_was_installed_with() -> None:
    pulled = spec_pulled()
    release = desired(pulled).model_copy(update={"llm": LlmConfig(api_key_env="IGNORED")})
    values = chart_values(
        release=release,
        workflow=SPEC,
        backend_name=IN_CLUSTER,
        backend=pulled.backend,
        placement=placement_of(pulled.run),
    )

    assert desired_from_values(name=RELEASE, values=values) == release.model_copy(
        update={"llm": LlmConfig(base_url=release.llm.base_url, model=release.llm.model)}
    )
    assert desired_from_values(name=RELEASE, values=with_role(values, ReleaseRole.STABLE)) == (
        promoted(desired_from_values(name=RELEASE, values=values))  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    "values",
    [{}, {"service": {"annotations": {}}}, {"workflowRun": "x"}],
    ids=["empty", "no-plnt-annotations", "malformed"],
)
def test_values_of_a_release_plnt_did_not_install_read_back_as_none(
    values: dict[str, Any],
) -> None:
    assert desired_from_values(name=RELEASE, values=values) is None


def test_a_role_only_change_alters_the_role_value_and_nothing_else() -> None:
    canary = _values()

    stable = with_role(canary, ReleaseRole.STABLE)

    assert stable == {**canary, "role": "stable"}
    assert canary["role"] == "canary"  # the recorded values are not mutated


def test_promoting_a_canary_leaves_its_pod_template_as_it_is() -> None:
    canary = _one(_render(_values(), is_install=False), "Deployment")["spec"]["template"]
    stable = _one(_render(_values(ReleaseRole.STABLE), is_install=False), "Deployment")
    assert stable["spec"]["template"] == canary


def test_a_gpu_class_the_backend_does_not_offer_is_refused_before_installing() -> None:
    pulled = spec_pulled(gpu_class="a100")

    with pytest.raises(BackendUnavailable, match=r"does not offer gpuClass 'a100' \(offered: h100"):
        chart_values(
            release=desired(pulled),
            workflow=SPEC,
            backend_name=IN_CLUSTER,
            backend=pulled.backend,
            placement=None,
        )


def test_an_llm_key_secret_outside_the_runner_namespace_is_refused() -> None:
    backend = PlntBackendSpec.model_validate(
        {
            **in_cluster_backend().model_dump(by_alias=True, exclude_none=True),
            "llm": {
                "baseUrl": "https://llm.example.com/v1",
                "model": "small",
                "apiKeySecretRef": {"name": "openai", "namespace": "elsewhere", "key": "k"},
            },
        }
    )

    with pytest.raises(BackendUnavailable, match="must be in the runners' namespace"):
        chart_values(
            release=desired(spec_pulled()),
            workflow=SPEC,
            backend_name=IN_CLUSTER,
            backend=backend,
            placement=None,
        )
