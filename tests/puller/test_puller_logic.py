"""The puller's pure decisions, without a bus, a registry or a clock."""

import subprocess
import sys

import pytest
from puller_support import (
    BACKEND,
    H100,
    VERSION,
    WORKFLOW,
    run_snapshot,
    workflow_doc,
    workflow_yaml,
)

from plnt_common.errors import (
    BackendUnavailable,
    BusUnavailable,
    Conflict,
    IntegrityMismatch,
    PlntError,
    RegistryUnavailable,
    ResourceNotFound,
    SpecInvalid,
    SpecNotFound,
)
from plnt_common.events import BackendChoice, RunFailed
from plnt_common.resources import PlntBackendSpec
from plnt_common.status import Reason
from plnt_common.workflow import spec_digest
from plnt_puller import logic

REF = f"{WORKFLOW}@{VERSION}"


def backend(*gpu_classes: str) -> PlntBackendSpec:
    return PlntBackendSpec.model_validate(
        {
            "type": "local",
            "gpuClasses": {g: {"resourceName": "nvidia.com/gpu"} for g in gpu_classes},
        }
    )


# --- saga gate --------------------------------------------------------------------------


def test_a_current_saga_is_pulled() -> None:
    assert logic.saga_gate(ended=False, superseded=False) is None


def test_an_ended_saga_is_ignored_even_when_also_superseded() -> None:
    gate = logic.saga_gate(ended=True, superseded=True)
    assert isinstance(gate, logic.Ignore)


def test_a_superseded_saga_fails_as_superseded_in_the_pulling_phase() -> None:
    gate = logic.saga_gate(ended=False, superseded=True)
    assert isinstance(gate, RunFailed)
    assert (gate.reason, gate.phase) == (Reason.SUPERSEDED, "Pulling")


# --- integrity and validation -----------------------------------------------------------


def test_integrity_without_a_pin_returns_the_digest() -> None:
    assert logic.verify_integrity(raw=b"spec", pinned=None) == spec_digest(b"spec")


def test_integrity_with_the_right_pin_returns_the_digest() -> None:
    digest = spec_digest(b"spec")
    assert logic.verify_integrity(raw=b"spec", pinned=digest) == digest


def test_integrity_mismatch_names_expected_and_actual_digests() -> None:
    pinned = "sha256:" + "a" * 64
    with pytest.raises(IntegrityMismatch) as caught:
        logic.verify_integrity(raw=b"spec", pinned=pinned)
    assert pinned in str(caught.value)
    assert spec_digest(b"spec") in str(caught.value)


def test_a_valid_spec_of_the_referenced_name_and_version_is_returned() -> None:
    workflow = logic.validate_spec(raw=workflow_yaml(), name=WORKFLOW, version=VERSION)
    assert (workflow.metadata.name, workflow.metadata.version) == (WORKFLOW, VERSION)
    assert len(workflow.spec.steps) == 4


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (workflow_doc(name="other"), f"declares other@{VERSION}, but the run references {REF}"),
        (workflow_doc(version="2.0.0"), f"declares {WORKFLOW}@2.0.0, but the run references {REF}"),
    ],
    ids=["other-name", "other-version"],
)
def test_a_spec_of_another_workflow_or_version_is_invalid(
    document: dict[str, object], problem: str
) -> None:
    with pytest.raises(SpecInvalid, match=problem):
        logic.validate_spec(raw=workflow_yaml(document), name=WORKFLOW, version=VERSION)


def test_validation_problems_surface_as_spec_invalid() -> None:
    with pytest.raises(SpecInvalid, match="not valid YAML"):
        logic.validate_spec(raw=b"{", name=WORKFLOW, version=VERSION)


# --- backend --------------------------------------------------------------------------


def test_a_missing_backend_is_unavailable_by_name() -> None:
    with pytest.raises(BackendUnavailable, match="PlntBackend 'gone' not found"):
        logic.check_backend(name="gone", backend=None, gpu_class=None)


def test_a_backend_offering_the_gpu_class_is_returned() -> None:
    offered = backend(H100)
    assert logic.check_backend(name=BACKEND, backend=offered, gpu_class=H100) is offered


def test_a_run_without_a_gpu_class_needs_no_gpu_offer() -> None:
    offered = backend()
    assert logic.check_backend(name=BACKEND, backend=offered, gpu_class=None) is offered


@pytest.mark.parametrize(
    ("offered", "listed"),
    [(("nvidia.com/l4", "nvidia.com/a100"), "nvidia.com/a100, nvidia.com/l4"), ((), "none")],
    ids=["other-classes", "no-classes"],
)
def test_an_unoffered_gpu_class_is_unavailable_naming_the_offered_ones(
    offered: tuple[str, ...], listed: str
) -> None:
    with pytest.raises(BackendUnavailable) as caught:
        logic.check_backend(name=BACKEND, backend=backend(*offered), gpu_class=H100)
    assert f"does not offer gpuClass '{H100}'" in str(caught.value)
    assert f"(offered: {listed})" in str(caught.value)


def test_spec_pulled_carries_the_run_digest_and_revision_of_its_generation() -> None:
    run = run_snapshot(registry="s3://microagents", generation=7)
    workflow = logic.validate_spec(raw=workflow_yaml(), name=WORKFLOW, version=VERSION)
    pulled = logic.spec_pulled(
        run=run,
        digest="sha256:" + "b" * 64,
        workflow=workflow,
        chosen=[BackendChoice(backend_name=BACKEND, backend=backend(H100))],
    )
    assert pulled.run == run
    assert (pulled.backend_name, pulled.fallbacks, pulled.passed_over) == (BACKEND, (), ())
    assert pulled.revision == f"{VERSION}-g7"
    assert (pulled.workflow_name, pulled.workflow_version) == (WORKFLOW, VERSION)
    assert pulled.spec_digest == "sha256:" + "b" * 64


# --- which failure for which error ---------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (SpecInvalid("bad"), Reason.SPEC_INVALID),
        (IntegrityMismatch("bad"), Reason.INTEGRITY_MISMATCH),
        (SpecNotFound("bad"), Reason.SPEC_NOT_FOUND),
        (BackendUnavailable("bad"), Reason.BACKEND_UNAVAILABLE),
    ],
    ids=["spec-invalid", "integrity", "not-found", "backend"],
)
def test_non_retryable_errors_fail_the_run_at_once_with_their_reason(
    error: PlntError, reason: Reason
) -> None:
    failure = logic.failure_for(error, ref=REF)
    assert failure is not None
    assert failure.reason is reason
    assert failure.phase == "Pulling"
    assert failure.message == f"cannot pull {REF}: bad"


@pytest.mark.parametrize(
    "error",
    [
        RegistryUnavailable("down"),
        BusUnavailable("down"),
        Conflict("lost a race"),
        ResourceNotFound("an error the puller does not expect"),
        RuntimeError("a bug"),
    ],
    ids=["registry", "bus", "conflict", "unexpected-plnt-error", "unexpected-exception"],
)
def test_retryable_and_unexpected_errors_are_retried_not_failed(error: Exception) -> None:
    assert logic.failure_for(error, ref=REF) is None


def test_exhaustion_after_registry_errors_reports_registry_unavailable_and_the_error() -> None:
    failure = logic.failure_after_exhaustion(
        RegistryUnavailable("s3://b/k: S3 did not answer"), ref=REF, attempts=6
    )
    assert failure.reason is Reason.REGISTRY_UNAVAILABLE
    assert failure.message == f"gave up pulling {REF} after 6 attempts: s3://b/k: S3 did not answer"


@pytest.mark.parametrize(
    "error",
    [BusUnavailable("nats down"), RuntimeError("delivery attempts exhausted"), KeyError()],
    ids=["bus", "consumer-crash-path", "bug-without-message"],
)
def test_exhaustion_after_other_errors_reports_delivery_exhausted(error: Exception) -> None:
    failure = logic.failure_after_exhaustion(error, ref=REF, attempts=3)
    assert failure.reason is Reason.DELIVERY_EXHAUSTED
    assert failure.message.startswith(f"gave up pulling {REF} after 3 attempts: ")
    assert failure.message.removeprefix(f"gave up pulling {REF} after 3 attempts: ")


# --- layering -------------------------------------------------------------------------


def test_logic_imports_no_io_library_even_indirectly() -> None:
    # A fresh interpreter: this test process has long imported nats and boto3 itself.
    probe = (
        "import sys, plnt_puller.logic; "
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'nats', 'boto3', 'botocore', 'urllib3', 'aiohttp', 'kubernetes'})))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert found == []
