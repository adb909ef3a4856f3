"""The values the installer passes to ``charts/plnt-runner``, and how it reads them back.

This is the one place that knows the chart's values keys (``charts/plnt-runner/values.yaml``
and its ``values.schema.json``, which rejects unknown keys). A release's values are also
the record of what was desired: ``desired_from_values`` rebuilds the ``DesiredRelease``
from them, so the Helm backend keeps no state of its own.

Fields the chart has no key for ride as annotations on the runner's Service
(``service.annotations``), not on the pod template, so changing one never restarts pods:
the WorkflowRun's namespace, the saga id, the workflow name, the GPU class and the
PlntBackend. The role (canary/stable) is the chart's ``role`` value; promoting a canary
changes only that value (``with_role``), so its pods stay as long as the chart keeps the
role off the pod template.

Pure functions: no Helm, no Kubernetes client.
"""

import copy
import os
from dataclasses import dataclass, field
from typing import Any

from plnt_common.errors import BackendUnavailable, SpecInvalid
from plnt_common.events import RunSnapshot
from plnt_common.releases import DesiredRelease, LlmConfig, ReleaseRole
from plnt_common.resources import (
    GpuClass,
    KubernetesTarget,
    PlntBackendSpec,
    RunnerPod,
    service_url,
)
from plnt_common.workflow import parse_workflow
from plnt_installer.adapters.runner_tracing import runner_tracing

RUNNER_SERVICE_PORT = 80
"""``service.port``: the port of the runner's Service, part of the URL the router calls."""

RUN_NAMESPACE = "plnt.work/namespace"
"""Annotation: the namespace of the WorkflowRun (releases live in the backend's namespace)."""
SAGA_ID = "plnt.work/saga-id"
"""Annotation: the saga that installed the release."""
WORKFLOW = "plnt.work/workflow"
"""Annotation: the workflow's name."""
GPU_CLASS = "plnt.work/gpu-class"
"""Annotation: the run's gpuClass (empty: none)."""
BACKEND = "plnt.work/backend"
"""Annotation: the PlntBackend the release was installed onto."""


@dataclass(frozen=True, kw_only=True)
class Placement:
    """What the run asks of the cluster beyond a ``DesiredRelease``."""

    node_selector: dict[str, str] = field(default_factory=dict)
    replicas_max: int = 1
    target_invocations_per_second: float | None = None


def placement_of(run: RunSnapshot) -> Placement:
    return Placement(
        node_selector=dict(run.spec.backend.node_selector),
        replicas_max=run.spec.replicas.max,
        target_invocations_per_second=run.spec.autoscaling.target_invocations_per_second,
    )


def gpu_class_of(
    release: DesiredRelease, *, backend_name: str, backend: PlntBackendSpec
) -> GpuClass | None:
    """The backend's class for the run's ``gpuClass``; ``BackendUnavailable`` if not offered.

    The puller checks this before the saga gets here; a PlntBackend edited since is
    caught again, before anything is installed.
    """
    if not release.gpu_class:
        return None
    offered = backend.gpu_classes.get(release.gpu_class)
    if offered is None:
        names = ", ".join(sorted(backend.gpu_classes)) or "none"
        raise BackendUnavailable(
            f"PlntBackend {backend_name!r} does not offer gpuClass {release.gpu_class!r} "
            f"(offered: {names})"
        )
    return offered


def chart_values(
    *,
    release: DesiredRelease,
    workflow: bytes,
    backend_name: str,
    backend: PlntBackendSpec,
    placement: Placement | None,
) -> dict[str, Any]:
    """Every value of one release, from the desired release, its spec and its backend.

    Raises ``BackendUnavailable`` for a gpuClass or LLM key the backend cannot provide
    and ``SpecInvalid`` for spec bytes that are not a valid Workflow.
    """
    spec = parse_workflow(workflow).spec
    try:
        workflow_text = workflow.decode()
    except UnicodeDecodeError:
        raise SpecInvalid("spec is not UTF-8 text") from None
    gpu = gpu_class_of(release, backend_name=backend_name, backend=backend)
    where = placement or Placement(replicas_max=release.replicas)
    values: dict[str, Any] = {
        "workflowRun": {"name": release.run_name},
        "revision": release.revision,
        "specDigest": release.spec_digest,
        "role": release.role.value,
        "workflow": workflow_text,
        "runtime": {"image": spec.runtime.image, "entrypoint": spec.runtime.entrypoint},
        "gpu": {
            "resourceName": gpu.resource_name if gpu else "",
            "count": release.gpu_count,
            "nodeSelector": dict(gpu.node_selector) if gpu else {},
        },
        "nodeSelector": dict(where.node_selector),
        "llm": {
            "baseUrl": release.llm.base_url,
            "model": release.llm.model,
            "apiKeySecretRef": _api_key_ref(backend_name=backend_name, backend=backend),
            "inputPricePerMTokUsd": release.llm.input_price_per_mtok_usd,
            "outputPricePerMTokUsd": release.llm.output_price_per_mtok_usd,
            "structuredOutputs": release.llm.structured_outputs,
        },
        "replicas": {"min": release.replicas, "max": max(release.replicas, where.replicas_max)},
        "tracing": runner_tracing(os.environ),
        "autoscaling": {"targetInvocationsPerSecond": where.target_invocations_per_second},
        "service": {
            "port": RUNNER_SERVICE_PORT,
            "annotations": {
                RUN_NAMESPACE: release.namespace,
                SAGA_ID: release.saga_id,
                WORKFLOW: release.workflow_name,
                GPU_CLASS: release.gpu_class or "",
                BACKEND: backend_name,
            },
        },
    }
    if backend.kubernetes is not None:
        add_reach(values, backend.kubernetes)
    # Only an explicit memoryGiB sizes the container; the model's default of 1 would
    # shrink the chart's own defaults.
    if "memory_gib" in spec.requirements.model_fields_set:
        values["memoryGiB"] = spec.requirements.memory_gib
    values.update(runner_pod_values(backend.runner_pod))
    return values


def add_reach(values: dict[str, Any], target: KubernetesTarget) -> None:
    """How plnt reaches the runner when it runs in another cluster: the Service exported
    to the clusterset, and the callers its NetworkPolicy admits beside plnt's own pods.
    Left out when unset, so releases installed before these settings keep their values."""
    if target.service_export:
        values["service"]["export"] = True
    if target.runner_callers:
        callers = [c.model_dump(by_alias=True, exclude_none=True) for c in target.runner_callers]
        values["networkPolicy"] = {"extraFrom": callers}


def runner_pod_values(pod: RunnerPod) -> dict[str, Any]:
    """The backend's ``spec.runnerPod`` as chart values, for every release it installs.

    Tolerations are the chart's ``tolerations`` (the GPU class's own are appended to
    them); labels and annotations go on the pod template, where the chart keeps plnt's
    own labels and annotations on a clash.
    """
    return {
        "tolerations": [t.model_dump(by_alias=True, exclude_none=True) for t in pod.tolerations],
        "affinity": copy.deepcopy(pod.affinity),
        "priorityClassName": pod.priority_class_name or "",
        "imagePullSecrets": [{"name": ref.name} for ref in pod.image_pull_secrets],
        "serviceAccountName": pod.service_account_name or "",
        "podLabels": dict(pod.labels),
        "podAnnotations": dict(pod.annotations),
    }


def _api_key_ref(*, backend_name: str, backend: PlntBackendSpec) -> dict[str, str]:
    """The LLM key Secret as the chart takes it: in the release namespace, or none."""
    ref = backend.llm.api_key_secret_ref if backend.llm else None
    if ref is None:
        return {"name": "", "key": ""}
    release_namespace = backend.kubernetes.namespace if backend.kubernetes else ""
    if ref.namespace not in (None, release_namespace):
        # Pods read Secrets of their own namespace only; copying keys across namespaces
        # is not done here.
        raise BackendUnavailable(
            f"PlntBackend {backend_name!r}: llm.apiKeySecretRef {ref.namespace}/{ref.name} "
            f"must be in the runners' namespace {release_namespace!r}"
        )
    return {"name": ref.name, "key": ref.key}


def with_role(values: dict[str, Any], role: ReleaseRole) -> dict[str, Any]:
    """``values`` with only the role changed: what promoting a canary upgrades with."""
    changed = copy.deepcopy(values)
    changed["role"] = role.value
    return changed


def desired_from_values(*, name: str, values: dict[str, Any]) -> DesiredRelease | None:
    """The ``DesiredRelease`` a release's values record; None if they are not plnt's.

    ``llm.api_key_env`` (a local-backend setting) is not recorded and reads back empty.
    """
    try:
        annotations = values["service"]["annotations"]
        llm = values.get("llm") or {}
        return DesiredRelease(
            namespace=annotations[RUN_NAMESPACE],
            run_name=values["workflowRun"]["name"],
            release=name,
            revision=values["revision"],
            role=ReleaseRole(values.get("role") or ReleaseRole.CANARY.value),
            saga_id=annotations[SAGA_ID],
            spec_digest=values.get("specDigest") or "",
            workflow_name=annotations[WORKFLOW],
            replicas=int(values["replicas"]["min"]),
            gpu_class=annotations.get(GPU_CLASS) or None,
            backend_name=annotations.get(BACKEND) or "",
            gpu_count=int((values.get("gpu") or {}).get("count") or 0),
            llm=LlmConfig(
                base_url=llm.get("baseUrl") or "",
                model=llm.get("model") or "",
                input_price_per_mtok_usd=float(llm.get("inputPricePerMTokUsd") or 0),
                output_price_per_mtok_usd=float(llm.get("outputPricePerMTokUsd") or 0),
                structured_outputs=bool(llm.get("structuredOutputs")),
            ),
        )
    except (KeyError, TypeError, ValueError):
        return None


def release_url(*, name: str, namespace: str, values: dict[str, Any], domain: str) -> str:
    """``service_url`` of an installed release, at the port its values gave the Service."""
    port = int((values.get("service") or {}).get("port") or RUNNER_SERVICE_PORT)
    return service_url(name=name, namespace=namespace, port=port, domain=domain)
