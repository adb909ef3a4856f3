"""When the watcher asks for a lost run's replacement (``spec.placement.failover``), and
when it does not: the decision, then the loop's timing against a clock it is given."""

from typing import Any

import pytest

from plnt_common.events import RunSnapshot
from plnt_common.projection import TERMINAL_RANK, RunProjection
from plnt_common.resources import PlacementEntry, WorkflowRunSpec, WorkflowRunStatus
from plnt_common.status import Phase
from plnt_watcher.replacement import Replacement, ReplacementLoop, replacement_of
from plnt_watcher.serving import Serving

SAGA = "default.wf.1.1"
LOST = Serving(
    ok=False, reason="RunnerFailed", message="stable 1.0.0-g1 is not serving", since=None
)


def snapshot(generation: int = 1, **placement: Any) -> RunSnapshot:
    spec = WorkflowRunSpec.model_validate(
        {
            "workflow": {"ref": "wf@1.0.0", "registry": "file:///registry"},
            "placement": {"backends": ["east", "west"], "failover": True, **placement},
        }
    )
    return RunSnapshot(namespace="default", name="wf", generation=generation, spec=spec)


def projection(
    phase: Phase = Phase.READY, *, serving: tuple[str, ...] = ("east",), settled: bool = True
) -> RunProjection:
    placement = tuple(PlacementEntry(backend=b, state="Serving") for b in serving)
    return RunProjection(
        namespace="default",
        name="wf",
        saga_id=SAGA,
        generation=1,
        rank=TERMINAL_RANK if settled else 3,
        status=WorkflowRunStatus(phase=phase, placement=placement),
    )


def test_a_settled_run_lost_on_its_one_backend_is_replaced_there_named_lost() -> None:
    decided = replacement_of(projection(), snapshot(), LOST)
    assert isinstance(decided, Replacement)
    assert decided.replaces == SAGA
    assert (decided.lost.backend, decided.lost.state) == ("east", "Lost")
    assert decided.lost.reason == (
        "RunnerFailed (stable 1.0.0-g1 is not serving): replaced on the next backend that fits"
    )


@pytest.mark.parametrize(
    ("run", "snap", "why"),
    [
        (None, snapshot(), "no projection"),
        (projection(Phase.PROGRESSING, settled=False), snapshot(), "not a settled Ready"),
        (projection(Phase.ROLLED_BACK), snapshot(), "not a settled Ready"),
        (projection(), snapshot(generation=2), "newer generation"),
        (projection(), snapshot(failover=False), "failover is off"),
        (projection(), snapshot(spread=2), "other copies take"),
        (projection(serving=()), snapshot(), "no single serving backend"),
        (projection(serving=("east", "west")), snapshot(), "no single serving backend"),
        (projection(), snapshot(backends=["east"]), "lists no other backend"),
    ],
)
def test_no_replacement_is_asked_for(
    run: RunProjection | None, snap: RunSnapshot, why: str
) -> None:
    decided = replacement_of(run, snap, LOST)
    assert isinstance(decided, str)
    assert why in decided


class CountingLoop(ReplacementLoop):
    """The loop with its bus reads and writes taken out: each replacement it would
    consider is counted."""

    def __init__(self, serving: dict[tuple[str, str], Serving], clock: list[float]) -> None:
        super().__init__(
            bus=None,  # type: ignore[arg-type]
            projections=None,  # type: ignore[arg-type]
            serving=lambda: serving,
            lost_after_s=30.0,
            clock=lambda: clock[0],
        )
        self.considered: list[tuple[str, str]] = []

    async def _replace(self, run: tuple[str, str], serving: Serving) -> None:
        self.considered.append(run)


async def test_a_run_is_considered_only_once_lost_for_lost_after_s() -> None:
    run = ("default", "wf")
    serving = {run: LOST}
    clock = [100.0]
    loop = CountingLoop(serving, clock)
    await loop.check()
    clock[0] = 129.0
    await loop.check()
    assert loop.considered == []
    clock[0] = 130.0
    await loop.check()
    assert loop.considered == [run]


async def test_a_runner_back_before_lost_after_s_starts_the_count_again() -> None:
    run = ("default", "wf")
    serving = {run: LOST}
    clock = [0.0]
    loop = CountingLoop(serving, clock)
    await loop.check()
    clock[0] = 20.0
    serving[run] = Serving(ok=True, reason="RunnerReady", message="", since=None)
    await loop.check()
    clock[0] = 25.0
    serving[run] = LOST
    await loop.check()
    clock[0] = 50.0
    await loop.check()
    assert loop.considered == []  # lost 25 s of the last 50, never 30 in a row


async def test_a_runner_starting_again_is_not_lost() -> None:
    run = ("default", "wf")
    starting = Serving(ok=False, reason="RunnerStarting", message="", since=None)
    clock = [0.0]
    loop = CountingLoop({run: starting}, clock)
    await loop.check()
    clock[0] = 600.0
    await loop.check()
    assert loop.considered == []
