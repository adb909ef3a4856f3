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
    assert [(e.backend, e.state) for e in decided.lost] == [("east", "Lost")]
    assert decided.lost[0].reason == (
        "RunnerFailed (stable 1.0.0-g1 is not serving): replaced on the next backend that fits"
    )
    assert decided.kept == ()


@pytest.mark.parametrize("reason", ["RunnerFailed", "NoReadyPods", "BackendUnreachable"])
def test_each_reason_a_backend_will_not_undo_by_itself_is_a_loss(reason: str) -> None:
    down = Serving(ok=False, reason=reason, message="", since=None)
    decided = replacement_of(projection(), snapshot(), down)
    assert isinstance(decided, Replacement)
    assert decided.lost[0].reason == f"{reason}: replaced on the next backend that fits"


COPY_LOST = Serving(
    ok=True,
    reason="RunnerReady",
    message="1.0.0-g1 at http://west; lost: east (RunnerFailed)",
    since=None,
    lost=(("east", "RunnerFailed"),),
)


def test_a_spread_runs_lost_copy_is_replaced_and_the_others_kept() -> None:
    run = projection(serving=("east", "west"))
    decided = replacement_of(run, snapshot(backends=["east", "west", "burst"], spread=2), COPY_LOST)
    assert isinstance(decided, Replacement)
    assert [(e.backend, e.state, e.reason) for e in decided.lost] == [
        ("east", "Lost", "RunnerFailed: replaced on the next backend that fits")
    ]
    assert [(e.backend, e.state) for e in decided.kept] == [("west", "Serving")]


def test_a_spread_run_with_every_copy_lost_replaces_them_all() -> None:
    run = projection(serving=("east", "west"))
    decided = replacement_of(run, snapshot(backends=["east", "west", "burst"], spread=2), LOST)
    assert isinstance(decided, Replacement)
    assert [e.backend for e in decided.lost] == ["east", "west"]
    assert decided.kept == ()


STARTING = Serving(ok=False, reason="RunnerStarting", message="", since=None)
COPY_STARTING = Serving(
    ok=True, reason="RunnerReady", message="", since=None, lost=(("east", "RunnerStarting"),)
)


@pytest.mark.parametrize(
    ("run", "snap", "serving", "why"),
    [
        (None, snapshot(), LOST, "no projection"),
        (projection(Phase.PROGRESSING, settled=False), snapshot(), LOST, "not a settled Ready"),
        (projection(Phase.ROLLED_BACK), snapshot(), LOST, "not a settled Ready"),
        (projection(), snapshot(generation=2), LOST, "newer generation"),
        (projection(), snapshot(failover=False), LOST, "failover is off"),
        (projection(serving=()), snapshot(), LOST, "no copy in status.placement is lost"),
        (projection(), snapshot(), STARTING, "no copy in status.placement is lost"),
        (
            projection(serving=("east", "west")),
            snapshot(spread=2),
            COPY_STARTING,
            "no copy in status.placement is lost",
        ),
        (
            projection(serving=("west",)),
            snapshot(spread=2),
            COPY_LOST,
            "no copy in status.placement is lost",  # east is not where it serves
        ),
        (projection(), snapshot(backends=["east"]), LOST, "lists no other backend"),
        (
            projection(serving=("east", "west")),
            snapshot(spread=2),
            COPY_LOST,
            "lists no other backend",
        ),
    ],
)
def test_no_replacement_is_asked_for(
    run: RunProjection | None, snap: RunSnapshot, serving: Serving, why: str
) -> None:
    decided = replacement_of(run, snap, serving)
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


async def test_a_spread_runs_copy_lost_for_lost_after_s_is_considered() -> None:
    run = ("default", "wf")
    clock = [0.0]
    loop = CountingLoop({run: COPY_LOST}, clock)
    await loop.check()
    clock[0] = 30.0
    await loop.check()
    assert loop.considered == [run]


async def test_a_runner_starting_again_is_not_lost() -> None:
    run = ("default", "wf")
    starting = Serving(ok=False, reason="RunnerStarting", message="", since=None)
    clock = [0.0]
    loop = CountingLoop({run: starting}, clock)
    await loop.check()
    clock[0] = 600.0
    await loop.check()
    assert loop.considered == []
