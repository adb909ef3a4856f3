"""``PlntBackend.spec.allowedNamespaces`` and ``allowedImages``, enforced at pull time.

A run outside them ends ``Failed`` ``BackendNotAllowed`` naming the rule and what it
refused, and nothing is pulled (no ``spec.pulled``, nothing stored, so nothing is ever
installed). On the Kubernetes path the namespace's labels are read from the API (the
emulator serves Namespace objects); in the embedded mode namespaces have no labels.
"""

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from puller_support import (
    BACKEND,
    H100,
    FileSource,
    PullerUnderTest,
    run_snapshot,
    workflow_yaml,
)

from plnt_common.events import EventType, RunFailed, RunSnapshot
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import parse_resource
from plnt_common.status import Reason
from plnt_common.workflow import spec_digest
from plnt_puller.adapters.spec_store import ObjectStoreSpecs
from plnt_testkit.kube_emulator import DEFAULT_TYPES, KubeEmulator

TEAM_A = {"matchLabels": {"plnt.work/tenant": "a"}}
IMAGE = "ghcr.io/microagents/runner:0.4.0"


def backend(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "PlntBackend",
        "metadata": {"name": BACKEND},
        "spec": {
            "type": "local",
            "gpuClasses": {H100: {"resourceName": "nvidia.com/gpu"}},
            **spec,
        },
    }


def in_namespace(run: RunSnapshot, namespace: str) -> RunSnapshot:
    return run.model_copy(update={"namespace": namespace})


async def outcome_of(puller: PullerUnderTest, run: RunSnapshot) -> tuple[EventType, Any]:
    outcome = await puller.outcome(await puller.request(run))
    return outcome.event_type, outcome.payload()


async def refused(puller: PullerUnderTest, run: RunSnapshot) -> RunFailed:
    kind, failure = await outcome_of(puller, run)
    assert kind is EventType.RUN_FAILED, failure
    assert isinstance(failure, RunFailed)
    assert failure.reason is Reason.BACKEND_NOT_ALLOWED, failure
    assert "attempts" not in failure.message  # not retried: the rule does not change by itself
    return failure


async def nothing_pulled(puller: PullerUnderTest) -> None:
    assert await puller.events_of(EventType.SPEC_PULLED) == []
    specs = ObjectStoreSpecs(js=puller.bus.js)
    assert not await specs.contains(digest=spec_digest(workflow_yaml()))


# --- the embedded mode: backends from the bus, namespaces without labels ---------------


async def apply_backend(puller: PullerUnderTest, **spec: Any) -> None:
    await ResourceStore(puller.bus).apply(parse_resource(backend(**spec)))


async def test_an_image_outside_allowed_images_is_refused_naming_prefixes_and_image(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    await apply_backend(puller, allowedImages=["registry.internal/", "ghcr.io/other/"])
    file_source.publish(workflow_yaml())

    failure = await refused(puller, run_snapshot(registry=file_source.url))

    assert "allowedImages registry.internal/, ghcr.io/other/" in failure.message
    assert repr(IMAGE) in failure.message
    await nothing_pulled(puller)


async def test_an_image_with_an_allowed_prefix_is_pulled(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    await apply_backend(puller, allowedImages=["registry.internal/", "ghcr.io/microagents/"])
    file_source.publish(workflow_yaml())

    kind, pulled = await outcome_of(puller, run_snapshot(registry=file_source.url))

    assert kind is EventType.SPEC_PULLED, pulled


async def test_embedded_namespaces_have_no_labels_so_a_selector_needing_one_refuses(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    await apply_backend(puller, allowedNamespaces=TEAM_A)
    file_source.publish(workflow_yaml())

    failure = await refused(puller, run_snapshot(registry=file_source.url))

    assert "allowedNamespaces 'plnt.work/tenant=a'" in failure.message
    assert "namespace 'default' (no labels)" in failure.message
    await nothing_pulled(puller)


async def test_embedded_a_selector_that_empty_labels_meet_allows(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    not_frozen = {"matchExpressions": [{"key": "frozen", "operator": "DoesNotExist"}]}
    await apply_backend(puller, allowedNamespaces=not_frozen)
    file_source.publish(workflow_yaml())

    kind, pulled = await outcome_of(puller, run_snapshot(registry=file_source.url))

    assert kind is EventType.SPEC_PULLED, pulled


# --- the Kubernetes path: labels of Namespace objects from the API --------------------


@pytest.fixture
def emulator() -> Iterator[KubeEmulator]:
    with KubeEmulator(types=DEFAULT_TYPES) as server:
        yield server


@pytest.fixture
async def kube_puller(
    puller: PullerUnderTest, emulator: KubeEmulator, tmp_path: Path
) -> PullerUnderTest:
    """The puller reading backends and namespaces from the emulator, where PlntBackend
    allows namespaces labelled tenant a, and namespaces team-a and team-b exist."""
    kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig")
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        core = client.CoreV1Api(api)
        for name, tenant in (("team-a", "a"), ("team-b", "b")):
            body = {"metadata": {"name": name, "labels": {"plnt.work/tenant": tenant}}}
            await asyncio.to_thread(core.create_namespace, body)
        await asyncio.to_thread(
            client.CustomObjectsApi(api).create_cluster_custom_object,
            "plnt.work",
            "v1",
            "plntbackends",
            backend(allowedNamespaces=TEAM_A),
        )
    finally:
        api.close()
    await puller.stop()
    puller.start(backends="kubernetes", kubeconfig=str(kubeconfig))
    return puller


async def test_a_run_in_a_namespace_the_selector_refuses_fails_naming_both(
    kube_puller: PullerUnderTest, file_source: FileSource
) -> None:
    file_source.publish(workflow_yaml())

    failure = await refused(
        kube_puller, in_namespace(run_snapshot(registry=file_source.url), "team-b")
    )

    assert "allowedNamespaces 'plnt.work/tenant=a'" in failure.message
    assert "namespace 'team-b'" in failure.message and "plnt.work/tenant=b" in failure.message
    await nothing_pulled(kube_puller)


async def test_a_run_in_a_namespace_the_selector_allows_is_pulled(
    kube_puller: PullerUnderTest, file_source: FileSource
) -> None:
    file_source.publish(workflow_yaml())

    kind, pulled = await outcome_of(
        kube_puller, in_namespace(run_snapshot(registry=file_source.url), "team-a")
    )

    assert kind is EventType.SPEC_PULLED, pulled


async def test_a_run_in_a_namespace_that_does_not_exist_is_refused(
    kube_puller: PullerUnderTest, file_source: FileSource
) -> None:
    file_source.publish(workflow_yaml())

    failure = await refused(
        kube_puller, in_namespace(run_snapshot(registry=file_source.url), "gone")
    )

    assert "namespace 'gone' not found" in failure.message
