"""The saga registry in plnt-sagas against a real nats-server: latest saga, claims, checks."""

from collections.abc import AsyncIterator

import pytest

from plnt_common import subjects
from plnt_common.bus import saga as registry
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_events
from plnt_common.bus.saga import advance_latest_saga, latest_saga, observe_saga
from plnt_common.errors import Conflict
from plnt_common.events import (
    Envelope,
    EventType,
    RunDeleted,
    RunReady,
    RunRemoved,
    follow_up,
    new_event,
    saga_id,
)
from plnt_common.saga import SagaState, TerminalClaim


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    opened = await Bus.open(nats_url, service="test")
    yield opened
    await opened.close()


def started(name: str, generation: int = 1, attempt: int = 1, namespace: str = "ns") -> Envelope:
    return new_event(
        EventType.RUN_DELETED,
        RunDeleted(),
        namespace=namespace,
        name=name,
        sagaid=saga_id(namespace, name, generation, attempt),
        generation=generation,
        source="test",
    )


async def stored(bus: Bus, name: str, namespace: str = "ns") -> list[Envelope]:
    return [
        s.event
        async for s in read_events(bus.nc, filter_subject=subjects.run_filter(namespace, name))
        if s.event is not None
    ]


async def test_a_run_without_a_saga_has_no_latest_record(bus: Bus) -> None:
    assert await latest_saga(bus, "ns", "none") == ("", 0)


async def test_the_first_saga_is_recorded_under_its_own_run_only(bus: Bus) -> None:
    assert await advance_latest_saga(bus, "ns", "a", "ns.a.1.1") == "ns.a.1.1"
    latest, revision = await latest_saga(bus, "ns", "a")
    assert (latest, revision > 0) == ("ns.a.1.1", True)
    assert (await bus.sagas.get("latest.ns.a")).value == b"ns.a.1.1"
    assert await latest_saga(bus, "other", "a") == ("", 0)
    assert await latest_saga(bus, "ns", "b") == ("", 0)


async def test_a_newer_saga_replaces_the_latest_and_an_older_one_never_does(bus: Bus) -> None:
    await advance_latest_saga(bus, "ns", "a", "ns.a.1.1")
    assert await advance_latest_saga(bus, "ns", "a", "ns.a.2.1") == "ns.a.2.1"
    _, revision = await latest_saga(bus, "ns", "a")
    # a slower replica still on generation 1, or its retry: the newer record stays
    assert await advance_latest_saga(bus, "ns", "a", "ns.a.1.1") == "ns.a.2.1"
    assert await advance_latest_saga(bus, "ns", "a", "ns.a.1.2") == "ns.a.2.1"
    assert await latest_saga(bus, "ns", "a") == ("ns.a.2.1", revision)


async def test_recording_the_latest_saga_again_writes_nothing(bus: Bus) -> None:
    await advance_latest_saga(bus, "ns", "a", "ns.a.1.1")
    before = await latest_saga(bus, "ns", "a")
    assert await advance_latest_saga(bus, "ns", "a", "ns.a.1.1") == "ns.a.1.1"
    assert await latest_saga(bus, "ns", "a") == before


async def test_a_stale_read_is_retried_against_the_record(bus: Bus) -> None:
    await advance_latest_saga(bus, "ns", "a", "ns.a.2.1")
    # the caller read before generation 2 was recorded: the write is refused, read again
    assert await advance_latest_saga(bus, "ns", "a", "ns.a.3.1", read=("", 0)) == "ns.a.3.1"
    assert await advance_latest_saga(bus, "ns", "a", "ns.a.1.1", read=("", 0)) == "ns.a.3.1"
    assert (await latest_saga(bus, "ns", "a"))[0] == "ns.a.3.1"


async def test_a_record_that_keeps_changing_is_a_conflict(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "CAS_ATTEMPTS", 0)
    with pytest.raises(Conflict, match=r"latest\.ns\.a kept changing"):
        await advance_latest_saga(bus, "ns", "a", "ns.a.1.1")


async def test_a_run_created_again_after_its_removal_starts_over(bus: Bus) -> None:
    deletion = started("again", generation=3, attempt=2)
    await advance_latest_saga(bus, "ns", "again", deletion.sagaid)
    # generation 1 of a run that still exists never replaces a newer saga...
    assert await advance_latest_saga(bus, "ns", "again", "ns.again.1.1") == deletion.sagaid
    # ...the removal of the run ends that rule
    removed = follow_up(deletion, EventType.RUN_REMOVED, RunRemoved(), source="test")
    assert await bus.publish_terminal(removed) is True
    assert await advance_latest_saga(bus, "ns", "again", "ns.again.1.1") == "ns.again.1.1"


async def test_a_newer_saga_that_ended_otherwise_still_wins(bus: Bus) -> None:
    newer = started("kept", generation=2)
    await advance_latest_saga(bus, "ns", "kept", newer.sagaid)
    ready = RunReady(revision="r", endpoint="e")
    assert await bus.publish_terminal(follow_up(newer, EventType.RUN_READY, ready, source="t"))
    assert await advance_latest_saga(bus, "ns", "kept", "ns.kept.1.1") == newer.sagaid


@pytest.mark.parametrize(
    ("latest", "ended", "state"),
    [
        ("", False, SagaState.CURRENT),
        ("ns.run.1.1", False, SagaState.CURRENT),
        ("ns.run.2.1", False, SagaState.SUPERSEDED),
        ("ns.run.1.1", True, SagaState.ENDED),
    ],
    ids=["unrecorded", "latest", "superseded", "ended"],
)
async def test_a_step_observes_its_saga_from_the_record_and_the_claim(
    bus: Bus, latest: str, ended: bool, state: SagaState
) -> None:
    event = started("run")
    if latest:
        await advance_latest_saga(bus, "ns", "run", latest)
    if ended:
        ready = RunReady(revision="r", endpoint="e")
        await bus.publish_terminal(follow_up(event, EventType.RUN_READY, ready, source="t"))
    assert await observe_saga(bus, event) is state


async def test_a_claim_its_step_died_before_publishing_is_published_when_the_step_returns(
    bus: Bus,
) -> None:
    cause = started("crashed")
    ready = RunReady(revision="r", endpoint="e")
    terminal = follow_up(cause, EventType.RUN_READY, ready, source="t")
    # the claim was written, then the process died before the publish
    await bus.sagas.create(cause.sagaid, TerminalClaim.of(terminal).encode())
    assert await stored(bus, "crashed") == []
    other = started("crashed")  # another event of the saga did not cause the claim
    assert await observe_saga(bus, other) is SagaState.ENDED
    assert await stored(bus, "crashed") == []
    assert await observe_saga(bus, cause) is SagaState.ENDED
    assert await stored(bus, "crashed") == [terminal]
    assert await observe_saga(bus, cause) is SagaState.ENDED  # again: deduplicated
    assert await stored(bus, "crashed") == [terminal]


async def test_a_claim_holding_only_its_type_ends_the_saga_without_a_publish(bus: Bus) -> None:
    cause = started("old-claim")
    await bus.sagas.create(cause.sagaid, b"run.ready")
    assert await observe_saga(bus, cause) is SagaState.ENDED
    assert await bus.terminal_claim(cause.sagaid) == TerminalClaim("run.ready")
    assert await stored(bus, "old-claim") == []


async def test_an_empty_claim_still_ends_the_saga(bus: Bus) -> None:
    cause = started("empty-claim")
    await bus.sagas.create(cause.sagaid, b"")
    assert await bus.saga_ended(cause.sagaid) is True
    assert await bus.terminal_claim(cause.sagaid) == TerminalClaim("")


async def test_an_empty_latest_record_reads_as_no_saga(bus: Bus) -> None:
    await bus.sagas.put("latest.ns.blank", b"")
    latest, revision = await latest_saga(bus, "ns", "blank")
    assert (latest, revision > 0) == ("", True)


def test_a_claim_holding_only_its_type_encodes_as_the_type() -> None:
    assert TerminalClaim("run.failed").encode() == b"run.failed"
    # bytes that are not UTF-8 still read back as a claim, never an error
    assert TerminalClaim.decode(b"run.\xff") == TerminalClaim("run.\ufffd")


async def test_an_unreadable_claim_ends_the_saga_as_a_claim_of_no_type(bus: Bus) -> None:
    cause = started("unreadable-claim")
    await bus.sagas.create(cause.sagaid, b'{"not": "an event"')
    assert await bus.terminal_claim(cause.sagaid) == TerminalClaim("")
