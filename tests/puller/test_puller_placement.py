"""``spec.placement.backends``: the puller walks the candidates in order of preference and
resolves the first that exists, offers the run's GPU class and allows the run; each one
passed over is named with its reason when none fits."""

from typing import Any

from puller_support import (
    BACKEND,
    H100,
    VERSION,
    WORKFLOW,
    FileSource,
    PullerUnderTest,
    workflow_yaml,
)

from plnt_common.events import EventType, RunFailed, RunSnapshot, SpecPulled
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import PlacementEntry, WorkflowRunSpec, parse_resource
from plnt_common.status import Reason

OTHER = "gpu-west"


def placed_run(
    *, registry: str, backends: list[str] | None = None, selector: dict[str, Any] | None = None
) -> RunSnapshot:
    placement = {"backends": backends} if selector is None else {"selector": selector}
    spec = WorkflowRunSpec.model_validate(
        {
            "workflow": {"ref": f"{WORKFLOW}@{VERSION}", "registry": registry},
            "backend": {"gpuClass": H100, "gpuCount": 2},
            "placement": placement,
        }
    )
    return RunSnapshot(namespace="default", name="placed", uid="uid-p", generation=1, spec=spec)


async def apply_backend(
    puller: PullerUnderTest, name: str, labels: dict[str, str] | None = None, **spec: Any
) -> None:
    resource = {
        "apiVersion": "plnt.work/v1",
        "kind": "PlntBackend",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"type": "local", "gpuClasses": {H100: {"resourceName": "nvidia.com/gpu"}}, **spec},
    }
    await ResourceStore(puller.bus).apply(parse_resource(resource))


async def outcome_of(puller: PullerUnderTest, run: RunSnapshot) -> Any:
    outcome = await puller.outcome(await puller.request(run))
    return outcome.event_type, outcome.payload()


async def test_the_first_candidate_that_exists_gets_the_run_in_order_of_preference(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    await apply_backend(puller, OTHER)
    file_source.publish(workflow_yaml())

    kind, pulled = await outcome_of(
        puller, placed_run(registry=file_source.url, backends=["gpu-gone", OTHER, BACKEND])
    )

    assert kind is EventType.SPEC_PULLED, pulled
    assert isinstance(pulled, SpecPulled)
    assert pulled.backend_name == OTHER
    # every acceptable one is handed on in order (the installer takes the first with room),
    # and the one passed over is named with its reason
    assert [c.backend_name for c in pulled.choices()] == [OTHER, BACKEND]
    assert [(e.backend, e.state, e.reason) for e in pulled.passed_over] == [
        ("gpu-gone", "Skipped", "BackendUnavailable: PlntBackend 'gpu-gone' not found")
    ]


async def test_a_refusing_candidate_is_passed_over_for_the_next(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    await apply_backend(puller, OTHER, allowedImages=["registry.internal/"])
    file_source.publish(workflow_yaml())

    kind, pulled = await outcome_of(
        puller, placed_run(registry=file_source.url, backends=[OTHER, BACKEND])
    )

    assert kind is EventType.SPEC_PULLED, pulled
    assert pulled.backend_name == BACKEND
    assert pulled.fallbacks == ()
    [skipped] = pulled.passed_over
    assert (skipped.backend, skipped.state) == (OTHER, "Skipped")
    assert skipped.reason.startswith("BackendNotAllowed: PlntBackend 'gpu-west' allows images")


async def test_no_candidate_fits_fails_naming_each_backends_reason(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    await apply_backend(puller, OTHER, allowedImages=["registry.internal/"])
    file_source.publish(workflow_yaml())

    kind, failure = await outcome_of(
        puller, placed_run(registry=file_source.url, backends=["gpu-gone", OTHER])
    )

    assert kind is EventType.RUN_FAILED, failure
    assert isinstance(failure, RunFailed)
    assert failure.reason is Reason.BACKEND_NOT_ALLOWED, failure
    assert "BackendUnavailable: PlntBackend 'gpu-gone' not found" in failure.message
    assert f"BackendNotAllowed: PlntBackend '{OTHER}' allows images" in failure.message
    assert "\n" not in failure.message


async def test_a_selector_takes_the_matching_backends_in_name_order(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    await apply_backend(puller, "pool-b", {"tier": "gpu"})
    await apply_backend(puller, "pool-a", {"tier": "gpu"})
    await apply_backend(puller, "pool-cpu", {"tier": "cpu"})
    file_source.publish(workflow_yaml())

    kind, pulled = await outcome_of(
        puller, placed_run(registry=file_source.url, selector={"matchLabels": {"tier": "gpu"}})
    )

    assert kind is EventType.SPEC_PULLED, pulled
    assert [c.backend_name for c in pulled.choices()] == ["pool-a", "pool-b"]


async def test_a_selector_matching_nothing_fails_naming_it(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    file_source.publish(workflow_yaml())

    kind, failure = await outcome_of(
        puller,
        placed_run(registry=file_source.url, selector={"matchLabels": {"tier": "quantum"}}),
    )

    assert kind is EventType.RUN_FAILED, failure
    assert failure.reason is Reason.BACKEND_UNAVAILABLE
    assert failure.message.endswith(
        ": no PlntBackend matches spec.placement.selector 'tier=quantum'"
    )


LOST_EAST = PlacementEntry(
    backend=BACKEND, state="Lost", reason="RunnerFailed: replaced on the next backend that fits"
)


async def test_a_replacement_passes_over_the_lost_backend_as_lost(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    await apply_backend(puller, OTHER)
    file_source.publish(workflow_yaml())
    run = placed_run(registry=file_source.url, backends=[BACKEND, OTHER])

    outcome = await puller.outcome(await puller.request(run, lost=(LOST_EAST,)))

    pulled = outcome.payload()
    assert isinstance(pulled, SpecPulled), pulled
    assert [c.backend_name for c in pulled.choices()] == [OTHER]
    assert pulled.passed_over == (LOST_EAST,)
    assert pulled.replacing()


async def test_a_replacement_with_no_other_backend_fails_naming_the_lost_one(
    puller: PullerUnderTest, file_source: FileSource
) -> None:
    await apply_backend(puller, OTHER, allowedImages=["registry.internal/"])
    file_source.publish(workflow_yaml())
    run = placed_run(registry=file_source.url, backends=[BACKEND, OTHER])

    outcome = await puller.outcome(await puller.request(run, lost=(LOST_EAST,)))

    failure = outcome.payload()
    assert isinstance(failure, RunFailed), failure
    assert f"BackendUnavailable: {BACKEND!r} is lost (RunnerFailed: replaced" in failure.message
    assert f"BackendNotAllowed: PlntBackend '{OTHER}' allows images" in failure.message
