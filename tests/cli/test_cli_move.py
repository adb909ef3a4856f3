"""``plnt move`` against a real nats-server with no saga services: what it writes to the run
(BACKEND first in ``spec.placement.backends``, the rest kept in order as fallbacks) and the
placements it refuses. The rollout itself is tests/e2e/test_e2e_move.py."""

from typing import Any

import pytest

from plnt_cli.commands import Session
from plnt_cli.move import move
from plnt_common.errors import PlntError
from plnt_common.resources import parse_resource


def run_body(name: str, placement: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "WorkflowRun",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "workflow": {"ref": "a@1.0.0", "registry": "oci://r.example/x"},
            "placement": placement,
        },
    }


def backend(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "PlntBackend",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"type": "local"},
    }


async def stored_run(
    session: Session,
    name: str,
    placement: dict[str, Any],
    entries: list[dict[str, Any]] | None = None,
) -> None:
    for each in ("gpu-east", "gpu-west", "burst"):
        await session.store.apply(parse_resource(backend(each, {"tier": "gpu"})))
    await session.store.apply(parse_resource(run_body(name, placement)))

    def ready(body: dict[str, Any]) -> dict[str, Any]:
        status = {"phase": "Ready", "observedGeneration": 1, "placement": entries or []}
        return {**body, "status": status}

    await session.store.mutate("WorkflowRun", "default", name, ready)


async def test_the_target_goes_first_and_the_other_backends_stay_as_fallbacks(
    bus_url: str,
) -> None:
    session = await Session.open(bus_url)
    try:
        await stored_run(session, "placed", {"backends": ["gpu-east", "gpu-west", "burst"]})
        said: list[str] = []
        with pytest.raises(PlntError, match=r"timed out after 0\.5s"):  # no saga services here
            await move(
                session, name="placed", namespace="default", to="burst", say=said.append, wait_s=0.5
            )
        stored = await session.store.get("WorkflowRun", "default", "placed")
        assert stored is not None
        assert stored.body["spec"]["placement"]["backends"] == ["burst", "gpu-east", "gpu-west"]
        assert stored.metadata["generation"] == 2
        assert said == [
            "workflowrun/placed: moving to burst (generation 2); waiting for the rollout…"
        ]
    finally:
        await session.close()


async def test_a_run_placed_by_selector_is_refused_unchanged(bus_url: str) -> None:
    session = await Session.open(bus_url)
    try:
        await stored_run(session, "selected", {"selector": {"matchLabels": {"tier": "gpu"}}})
        with pytest.raises(PlntError) as refused:
            await move(session, name="selected", namespace="default", to="burst", say=print)
        assert str(refused.value) == (
            "workflowrun/selected picks its backends by spec.placement.selector: label "
            "PlntBackend 'burst' to match it, or list backends instead"
        )
        stored = await session.store.get("WorkflowRun", "default", "selected")
        assert stored is not None and stored.metadata["generation"] == 1
    finally:
        await session.close()


async def test_a_backend_listed_first_already_but_passed_over_says_why(bus_url: str) -> None:
    session = await Session.open(bus_url)
    try:
        skipped = {"backend": "gpu-east", "state": "Skipped", "reason": "NoCapacity: full"}
        serving = {"backend": "gpu-west", "state": "Serving", "replicas": 1}
        await stored_run(
            session, "spilled", {"backends": ["gpu-east", "gpu-west"]}, [serving, skipped]
        )
        with pytest.raises(PlntError) as refused:
            await move(session, name="spilled", namespace="default", to="gpu-east", say=print)
        assert str(refused.value) == (
            "workflowrun/spilled already lists gpu-east first and was placed elsewhere: "
            "gpu-east was passed over (NoCapacity: full); its next rollout goes there if it "
            "has room by then"
        )
        stored = await session.store.get("WorkflowRun", "default", "spilled")
        assert stored is not None and stored.metadata["generation"] == 1
    finally:
        await session.close()
