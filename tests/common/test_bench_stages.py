"""The saga bench's split of a deploy into steps, from the server's stored marks."""

import json

import pytest

from bench.stages import APPLIED, READY, STAGES, stage_durations, stored_marks
from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.events import EventType
from plnt_common.resource_store import object_key

SAGA = ("run.requested", "spec.pulled", "canary.installed", "smoke.passed", "run.ready")


def test_each_step_runs_from_the_mark_before_it_to_its_own() -> None:
    marks = [("a", APPLIED, 10.0), ("a", READY, 10.9)]
    marks += [("a", mark, 10.1 + 0.1 * index) for index, mark in enumerate(SAGA)]
    # a redelivered step published again: its first store is when the step ended
    marks.append(("a", "spec.pulled", 10.6))

    durations = stage_durations(marks)

    assert [round(durations[stage][0], 3) for stage, _, _ in STAGES] == [
        0.1,
        0.1,
        0.1,
        0.1,
        0.1,
        0.4,
    ]


def test_a_run_missing_a_mark_is_left_out_of_the_steps_that_need_it() -> None:
    marks = [("a", APPLIED, 1.0), ("a", "run.requested", 1.5), ("b", "run.requested", 2.0)]

    durations = stage_durations(marks)

    assert durations[STAGES[0][0]] == [0.5]
    assert all(not samples for stage, samples in durations.items() if stage != STAGES[0][0])


async def test_the_marks_are_read_back_for_the_runs_asked_for_only(bus: Bus) -> None:
    for name in ("a", "b"):
        key = object_key("WorkflowRun", "default", name)

        async def status(phase: str, name: str = name, key: str = key) -> None:
            body = {"metadata": {"name": name}, "status": {"phase": phase} if phase else {}}
            await bus.resources.put(key, json.dumps(body).encode())

        await status("")  # the apply
        await status("Pending")  # the finalizer's write
        for event_type in SAGA:
            subject = subjects.event_subject(EventType(event_type), "default", name)
            await bus.js.publish(subject, b"{}")
        await status(READY)

    marks = await stored_marks(bus.nc, "default", {"a"})

    assert {run for run, _, _ in marks} == {"a"}
    assert [mark for _, mark, _ in marks] == [*SAGA, APPLIED, READY]
    times = {mark: stored for _, mark, stored in marks}
    assert times[APPLIED] <= times["run.requested"] <= times["run.ready"] <= times[READY]
    assert sum(samples[0] for samples in stage_durations(marks).values()) == pytest.approx(
        times[READY] - times[APPLIED]
    )
