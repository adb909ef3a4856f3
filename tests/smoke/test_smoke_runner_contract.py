"""The smoke step checks the runner contract's clauses 2-6 and 8 before its budget test: against
real runner processes (the standard-library example, and variants of it that break a
clause) and a real nats-server."""

from pathlib import Path

import pytest
from aiohttp import web
from test_smoke_handlers import REVISION, handle, installed, serving_invoke, smoke_verdicts

from plnt_common.bus.bus import Bus
from plnt_common.bus.saga import advance_latest_saga
from plnt_common.events import EventType, SmokeFigures, SmokeVerdict
from plnt_common.status import Reason
from plnt_testkit.stdlib_runner import broken_runner, running


async def verdict(nats_url: str, name: str, url: str) -> tuple[EventType, SmokeFigures]:
    bus = await Bus.open(nats_url, service="test")
    event = installed(name, url)
    await advance_latest_saga(bus, "default", name, event.sagaid)
    await handle(bus, event)
    (published,) = await smoke_verdicts(bus, name)
    await bus.close()
    data: SmokeVerdict = published.payload()
    return published.event_type, data.figures


async def test_a_runner_keeping_the_contract_goes_on_to_its_budget_test(nats_url: str) -> None:
    async with running(revision=REVISION) as url:
        kind, figures = await verdict(nats_url, "keeps", url)
    assert kind is EventType.SMOKE_PASSED, figures.reason
    assert figures.failure is None
    assert figures.invocations == 3


@pytest.mark.parametrize(
    ("broken", "clause", "detail"),
    [
        ("no-tokens-header", "clause 3 invoke", "response lacks the x-plnt-tokens header"),
        (
            "no-result-event",
            "clause 5 stream",
            "stream has no result or error event (events: step, done)",
        ),
        ("new-trace", "clause 8 trace", "traceparent names trace "),
    ],
    ids=["missing-x-plnt-tokens", "no-result-sse-event", "answers-in-a-new-trace"],
)
async def test_a_canary_missing_a_clause_fails_runner_contract_naming_it_without_budget_calls(
    nats_url: str, tmp_path: Path, broken: str, clause: str, detail: str
) -> None:
    async with running(broken_runner(tmp_path, broken), revision=REVISION) as url:
        kind, figures = await verdict(nats_url, broken, url)
    assert kind is EventType.SMOKE_FAILED
    assert figures.failure is Reason.RUNNER_CONTRACT
    assert figures.reason.startswith(f"runner contract v1: {clause}: {detail}")
    assert figures.invocations == 0  # judged before the budget test


async def test_a_canary_echoing_another_revision_misses_clause_3(nats_url: str) -> None:
    async with running(revision="some-other-revision") as url:
        kind, figures = await verdict(nats_url, "other", url)
    assert kind is EventType.SMOKE_FAILED
    assert figures.failure is Reason.RUNNER_CONTRACT
    assert "clause 3 invoke: x-plnt-revision is 'some-other-revision'" in figures.reason


async def test_a_canary_whose_workflow_fails_is_judged_by_its_error_budget_not_the_contract(
    nats_url: str,
) -> None:
    async def failing(request: web.Request) -> web.Response:
        return web.json_response(
            {"error": "step 'call_home' failed", "step": "call_home"}, status=500
        )

    async with serving_invoke(failing) as url:
        kind, figures = await verdict(nats_url, "failing", url)
    assert kind is EventType.SMOKE_FAILED
    assert figures.failure is None
    assert figures.reason.startswith("error rate 100.0% over budget"), figures.reason
    assert figures.invocations == 3
