"""Validation of what users write: WorkflowRun, PlntBackend and the microagents Workflow."""

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from plnt_common.errors import SpecInvalid
from plnt_common.resources import PlntBackend, WorkflowRun, parse_resource
from plnt_common.workflow import MAX_SPEC_BYTES, parse_workflow, spec_digest, topological_order

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WORKFLOW = (EXAMPLES / "registry" / "review-responder" / "1.2.0" / "workflow.yaml").read_bytes()


def run_document() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / "workflowrun.yaml").read_text())
    return document


def test_the_examples_parse() -> None:
    run = parse_resource(run_document())
    backend = parse_resource(yaml.safe_load((EXAMPLES / "backend-local.yaml").read_text()))
    assert isinstance(run, WorkflowRun)
    assert isinstance(backend, PlntBackend)
    assert run.spec.canary.traffic_percent == 5
    assert run.spec.workflow.name == "review-responder"
    workflow = parse_workflow(WORKFLOW)
    assert topological_order(workflow.spec.steps) == [
        "classify_intent",
        "retrieve_brand_voice",
        "draft_reply",
        "safety_check",
    ]


def test_the_digest_is_the_sha256_of_the_bytes() -> None:
    assert (
        spec_digest(b"")
        == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


def mutated(path: str, value: Any) -> dict[str, Any]:
    document = copy.deepcopy(run_document())
    target = document
    *parents, last = path.split(".")
    for key in parents:
        target = target[key]
    target[last] = value
    return document


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("metadata.name", "a" * 41, "longer than 40 characters"),
        ("metadata.name", "Review_Responder", "not a DNS-1123 label"),
        ("metadata.name", "../etc", "not a DNS-1123 label"),
        ("spec.workflow.ref", "review-responder", "must look like <name>@<semver>"),
        ("spec.workflow.ref", "review-responder@latest", "not semver"),
        ("spec.workflow.ref", "../x@1.0.0", "not a DNS-1123 label"),
        ("spec.workflow.ref", "a*b@1.0.0", "not a DNS-1123 label"),
        ("spec.workflow.registry", "http://example.com", "must be s3://bucket"),
        ("spec.workflow.registry", "file://relative/path", "must be s3://bucket"),
        ("spec.workflow.registry", "s3://bucket/../other", "must be s3://bucket"),
        ("spec.workflow.integrityHash", "sha256:9a1b", "64 lowercase hex"),
        ("spec.canary.trafficPercent", 101, "less than or equal to 100"),
        ("spec.replicas", {"min": 3, "max": 2}, "replicas.min (3) exceeds replicas.max (2)"),
        ("spec.smokeTest.invocations", 0, "greater than or equal to 1"),
        ("spec.backend.cluster", "Bad Cluster", "not a DNS-1123 label"),
        ("spec.unknownField", 1, "Extra inputs are not permitted"),
    ],
    ids=lambda value: str(value)[:30],
)
def test_a_bad_workflowrun_is_refused_naming_the_field(path: str, value: Any, message: str) -> None:
    with pytest.raises(SpecInvalid, match="WorkflowRun") as error:
        parse_resource(mutated(path, value))
    assert message in str(error.value)


def test_a_kubernetes_backend_needs_exactly_one_credential_source() -> None:
    base = {"apiVersion": "plnt.work/v1", "kind": "PlntBackend", "metadata": {"name": "gpu"}}
    with pytest.raises(SpecInvalid, match=r"needs spec\.kubernetes"):
        parse_resource({**base, "spec": {"type": "kubernetes"}})
    with pytest.raises(SpecInvalid, match="exactly one of inCluster"):
        parse_resource({**base, "spec": {"type": "kubernetes", "kubernetes": {"namespace": "x"}}})
    ok = parse_resource({**base, "spec": {"type": "kubernetes", "kubernetes": {"inCluster": True}}})
    assert isinstance(ok, PlntBackend)


@pytest.mark.parametrize(
    ("kubernetes", "message"),
    [
        ({"serviceDomain": "Svc.Local"}, "'Svc.Local' is not a DNS name such as"),
        ({"serviceDomain": "svc..local"}, "'svc..local' is not a DNS name"),
        ({"runnerCallers": [{"ipBlock": {"cidr": "10.8.0.0/33"}}]}, "is not a CIDR such as"),
        (
            {"runnerCallers": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["x"]}}]},
            "'x' is not a CIDR",
        ),
        ({"runnerCallers": [{}]}, "a runner caller is an ipBlock, or a namespaceSelector"),
        ({"serviceExport": "maybe"}, "serviceExport"),
    ],
    ids=["domain-case", "domain-empty-part", "cidr", "except", "no-peer", "export"],
)
def test_how_plnt_reaches_a_backend_s_runners_is_checked_naming_the_field(
    kubernetes: dict[str, Any], message: str
) -> None:
    spec = {"type": "kubernetes", "kubernetes": {"inCluster": True, **kubernetes}}
    document = {"apiVersion": "plnt.work/v1", "kind": "PlntBackend", "metadata": {"name": "g"}}
    with pytest.raises(SpecInvalid, match=r"spec\.kubernetes") as error:
        parse_resource({**document, "spec": spec})
    assert message in str(error.value)


def workflow_with(steps: list[dict[str, Any]]) -> bytes:
    document = yaml.safe_load(WORKFLOW)
    document["spec"]["steps"] = steps
    return yaml.safe_dump(document).encode()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (workflow_with([{"id": "a", "tool": "llm.generate", "deps": ["a"]}]), "cycle: a -> a"),
        (
            workflow_with(
                [
                    {"id": "a", "tool": "llm.generate", "deps": ["c"]},
                    {"id": "b", "tool": "llm.generate", "deps": ["a"]},
                    {"id": "c", "tool": "llm.generate", "deps": ["b"]},
                ]
            ),
            "steps form a cycle",
        ),
        (workflow_with([{"id": "a", "tool": "shell.exec"}]), "unknown tool 'shell.exec'"),
        (
            workflow_with([{"id": "a", "tool": "llm.generate", "deps": ["ghost"]}]),
            "unknown step 'ghost'",
        ),
        (
            workflow_with([{"id": "a", "tool": "llm.generate"}, {"id": "a", "tool": "rag.query"}]),
            "duplicate step id 'a'",
        ),
        (workflow_with([]), "at least 1 item"),
        (workflow_with([{"id": "a", "tool": "http.request"}]), "needs with.url"),
        (b"spec: [unclosed", "not valid YAML"),
        (b"- just\n- a list\n", "must be a YAML mapping"),
        (b"x" * (MAX_SPEC_BYTES + 1), "over the 262144-byte bound"),
        (WORKFLOW.replace(b"name: review-responder", b"name: ../../etc"), "not a DNS-1123 label"),
        (WORKFLOW.replace(b"version: 1.2.0", b"version: one"), "not semver"),
    ],
    ids=[
        "self-cycle",
        "three-cycle",
        "unknown-tool",
        "missing-dep",
        "duplicate-ids",
        "no-steps",
        "http-without-url",
        "bad-yaml",
        "not-a-mapping",
        "oversize",
        "traversal-name",
        "bad-version",
    ],
)
def test_a_bad_workflow_spec_is_refused_naming_the_problem(raw: bytes, message: str) -> None:
    with pytest.raises(SpecInvalid) as error:
        parse_workflow(raw)
    assert message in str(error.value)
