"""Capacity arithmetic and placement decisions: pure, no bus, no cluster."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from plnt_common.capacity import Reservation, class_capacity, local_nodes, node_free
from plnt_common.releases import DesiredRelease, ReleaseRole
from plnt_common.resources import GpuClass
from plnt_installer import capacity
from plnt_installer.capacity import Refusal
from plnt_installer.settings import InstallerSettings

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
GPU = "nvidia.com/gpu"
A100 = GpuClass(resourceName=GPU, nodeSelector={"gpu": "a100"}, capacity=0)
HOLD_S = 660.0


def node(name: str, gpus: int | str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"gpu": "a100"} if labels is None else labels},
        "status": {"allocatable": {GPU: str(gpus), "cpu": "32"}},
    }


def pod(node_name: str, gpus: int, *, phase: str = "Running") -> dict[str, Any]:
    return {
        "spec": {
            "nodeName": node_name,
            "containers": [{"resources": {"requests": {GPU: str(gpus)}}}, {"resources": {}}],
        },
        "status": {"phase": phase},
    }


def canary(gpus: int, *, replicas: int = 1, name: str = "run-g1") -> DesiredRelease:
    return DesiredRelease(
        namespace="default",
        release=name,
        run_name="run",
        revision="1.0.0-g1",
        saga_id="default.run.1.1",
        role=ReleaseRole.CANARY,
        spec_digest="sha256:" + "0" * 64,
        workflow_name="run",
        gpu_class="a100",
        gpu_count=gpus,
        replicas=replicas,
    )


def observed(nodes: dict[str, int], *, at: datetime = NOW):
    return class_capacity(name="a100", gpu_class=A100, nodes=nodes, now=at)


def test_free_per_node_is_allocatable_minus_the_requests_of_pods_not_terminated() -> None:
    nodes = [
        node("a", 2),
        node("b", 4),
        node("cpu-only", 0, labels={}),  # outside the class's nodeSelector
        {"metadata": {"name": "c", "labels": {"gpu": "a100"}}, "status": {"allocatable": {}}},
    ]
    pods = [
        pod("a", 1),
        pod("b", 1),
        pod("b", 2, phase="Pending"),  # bound and pending: the scheduler counts it
        pod("b", 1, phase="Succeeded"),  # terminated: holds nothing
        pod("b", 1, phase="Failed"),
        pod("elsewhere", 8),
        {"spec": {"containers": [{"resources": {"requests": {GPU: "1"}}}]}},  # unscheduled
    ]
    assert node_free(gpu_class=A100, nodes=nodes, pods=pods) == {"a": 1, "b": 1}


def test_gpus_asked_through_limits_alone_and_a_cordoned_node_count() -> None:
    cordoned = node("c", 4) | {"spec": {"unschedulable": True}}
    limited = {
        "spec": {"nodeName": "a", "containers": [{"resources": {"limits": {GPU: "2"}}}]},
        "status": {"phase": "Running"},
    }
    assert node_free(gpu_class=A100, nodes=[node("a", 3), cordoned], pods=[limited]) == {
        "a": 1,
        "c": 0,
    }


def test_largest_free_on_one_node_is_the_largest_node_not_the_average() -> None:
    seen = observed({"a": 3, "b": 1})
    assert (seen.free, seen.largest_free_on_one_node) == (4, 3)


def test_local_capacity_is_the_declared_capacity_minus_plnt_s_releases() -> None:
    declared = GpuClass(resourceName=GPU, capacity=8)
    assert local_nodes(gpu_class=declared, held=3) == {"local": 5}
    assert local_nodes(gpu_class=declared, held=10) == {"local": 0}


def test_two_nodes_with_one_free_each_do_not_hold_a_two_gpu_runner() -> None:
    decided = capacity.place(
        canary=canary(2),
        capacity=observed({"a": 1, "b": 1}),
        reservations=(),
        now=NOW,
        hold_s=HOLD_S,
    )
    assert decided == Refusal(
        needed=2, largest_free=1, message="no node has 2 free nvidia.com/gpu (largest 1)"
    )


def test_a_runner_is_booked_on_the_fullest_node_it_fits() -> None:
    decided = capacity.place(
        canary=canary(2),
        capacity=observed({"a": 4, "b": 2}),
        reservations=(),
        now=NOW,
        hold_s=HOLD_S,
    )
    assert isinstance(decided, list)
    assert [(r.node, r.gpus) for r in decided] == [("b", 2)]


def test_reservations_count_until_an_observation_after_the_runner_came_up() -> None:
    held = Reservation(
        release="default/other-g1", gpu_class="a100", node="a", gpus=1, reserved_at=NOW
    )
    before = observed({"a": 1}, at=NOW + timedelta(seconds=1))
    assert isinstance(
        capacity.place(
            canary=canary(1), capacity=before, reservations=[held], now=NOW, hold_s=HOLD_S
        ),
        Refusal,
    )
    up = held.model_copy(update={"up_at": NOW + timedelta(seconds=2)})
    assert isinstance(
        capacity.place(
            canary=canary(1), capacity=before, reservations=[up], now=NOW, hold_s=HOLD_S
        ),
        Refusal,
    )
    after = observed({"a": 1}, at=NOW + timedelta(seconds=3))  # counts the pod itself
    assert isinstance(
        capacity.place(canary=canary(1), capacity=after, reservations=[up], now=NOW, hold_s=HOLD_S),
        list,
    )


def test_a_reservation_whose_runner_never_came_up_expires_after_the_hold() -> None:
    held = Reservation(
        release="default/other-g1", gpu_class="a100", node="a", gpus=1, reserved_at=NOW
    )
    late = NOW + timedelta(seconds=HOLD_S + 1)
    decided = capacity.place(
        canary=canary(1), capacity=observed({"a": 1}), reservations=[held], now=late, hold_s=HOLD_S
    )
    assert isinstance(decided, list)


def test_a_redelivered_placement_replaces_its_own_reservation() -> None:
    mine = Reservation(
        release="default/run-g1", gpu_class="a100", node="a", gpus=1, reserved_at=NOW
    )
    decided = capacity.place(
        canary=canary(1), capacity=observed({"a": 1}), reservations=[mine], now=NOW, hold_s=HOLD_S
    )
    assert isinstance(decided, list)
    stored = capacity.after_booking(
        [mine], decided, release="default/run-g1", observed_at=NOW, now=NOW, hold_s=HOLD_S
    )
    assert len(stored) == 1


@pytest.mark.parametrize(
    ("nodes", "replicas", "fits"),
    [({"a": 1, "b": 1}, 2, True), ({"a": 1}, 2, False), ({"a": 2}, 2, True)],
    ids=["a-replica-per-node", "second-replica-has-no-room", "both-on-one-node"],
)
def test_every_replica_needs_a_node(nodes: dict[str, int], replicas: int, fits: bool) -> None:
    decided = capacity.place(
        canary=canary(1, replicas=replicas),
        capacity=observed(nodes),
        reservations=(),
        now=NOW,
        hold_s=HOLD_S,
    )
    assert isinstance(decided, list) is fits


def test_the_observation_interval_cannot_make_the_view_older_than_ten_seconds() -> None:
    assert InstallerSettings(capacity_interval_s=10).capacity_interval_s == 10
    with pytest.raises(ValidationError, match="less than or equal to 10"):
        InstallerSettings(capacity_interval_s=11)
