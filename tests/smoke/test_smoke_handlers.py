"""The smoke step against a real nats-server and a real HTTP runner: verdicts by saga state."""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.history import read_events
from plnt_common.bus.saga import advance_latest_saga
from plnt_common.events import (
    CanaryInstalled,
    CanaryRef,
    Envelope,
    EventType,
    RunFailed,
    RunSnapshot,
    SmokeFigures,
    SmokeVerdict,
    SpreadRelease,
    follow_up,
    saga_id,
)
from plnt_common.resources import WorkflowRunSpec
from plnt_common.status import Phase, Reason
from plnt_smoke.adapters.contract import CONTRACT_INVOCATIONS
from plnt_smoke.adapters.harness import SmokeHarness
from plnt_smoke.contract import USAGE_FIELDS
from plnt_smoke.handlers import SmokeHandlers
from plnt_smoke.ports import SimilarityScorer, SimilarityUnavailable
from plnt_testkit.events import run_requested

DELIVERY = Delivery(msg=None, attempt=1)  # type: ignore[arg-type]


class Runner:
    """A canary's ``POST /invoke``: counts calls; answers only once ``open`` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.open = asyncio.Event()

    async def invoke(self, request: web.Request) -> web.Response:
        self.calls += 1
        await self.open.wait()
        return web.json_response({"output": "ok"})


Handler = Callable[[web.Request], Awaitable[web.Response]]


REVISION = "1.0.0-g1"
"""The canary revision ``installed`` names; a runner echoes it in ``x-plnt-revision``."""


@contextlib.asynccontextmanager
async def serving_invoke(invoke: Handler) -> AsyncIterator[str]:
    """A real HTTP server keeping the runner contract around ``invoke``, which sees every
    JSON-object invocation (the smoke step's and the contract check's); yields its URL."""

    async def contract_invoke(request: web.Request) -> web.StreamResponse:
        try:
            body = json.loads(await request.read())
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return web.json_response({"error": "send a JSON object"}, status=422)
        answer = await invoke(request)
        if answer.status != 200:
            return answer
        result = json.loads(answer.text or "{}")
        output = result["output"]
        reply = output.get("reply") if isinstance(output, dict) else None
        result |= {"reply": reply, "usage": dict.fromkeys(USAGE_FIELDS, 0)}
        if "text/event-stream" not in request.headers.get("Accept", ""):
            return web.json_response(result, headers={"x-plnt-tokens": "0,0"})
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await stream.prepare(request)
        await stream.write(f"event: result\ndata: {json.dumps(result)}\n\n".encode())
        return stream

    async def add_revision(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["x-plnt-revision"] = REVISION
        traceparent = request.headers.get("traceparent")
        if traceparent is not None:  # clause 8: the caller's trace, a span of our own
            response.headers["traceparent"] = traceparent[:36] + "1" * 16 + traceparent[52:]

    async def metrics(request: web.Request) -> web.Response:
        names = "plnt_invocations_total 1\nplnt_invocation_duration_seconds_count 1\n"
        return web.Response(text=names)

    app = web.Application()
    app.on_response_prepare.append(add_revision)
    app.router.add_post("/invoke", contract_invoke)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    async with TestServer(app, host="127.0.0.1") as server:
        yield str(server.make_url("")).rstrip("/")


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


@pytest.fixture
async def runner() -> AsyncIterator[tuple[Runner, str]]:
    runner = Runner()
    async with serving_invoke(runner.invoke) as url:
        yield runner, url


def installed(
    name: str, url: str, *, generation: int = 1, golden: list[dict[str, Any]] | None = None
) -> Envelope:
    spec = WorkflowRunSpec.model_validate(
        {
            "workflow": {"ref": "wf@1.0.0", "registry": "file:///registry"},
            "backend": {"cluster": "c"},
            "smokeTest": {"invocations": 3, "golden": golden or []},
        }
    )
    run = RunSnapshot(namespace="default", name=name, generation=generation, spec=spec)
    canary = CanaryRef(revision=REVISION, release=f"{name}-g1", url=url)
    return follow_up(
        run_requested(run),
        EventType.CANARY_INSTALLED,
        CanaryInstalled(run=run, canary=canary),
        source="test",
    )


async def smoke_verdicts(bus: Bus, name: str) -> list[Envelope]:
    return [
        stored.event
        async for stored in read_events(bus.nc, filter_subject=subjects.run_filter("default", name))
        if stored.event is not None and stored.event.event_type.value.startswith("smoke")
    ]


async def smoke_events(bus: Bus, name: str) -> list[EventType]:
    return [event.event_type for event in await smoke_verdicts(bus, name)]


class WordOverlap:
    """A ``SimilarityScorer`` for handler tests: the share of reference words in the text."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[str]]] = []

    async def similarities(self, *, texts: Sequence[str], references: Sequence[str]) -> list[float]:
        self.calls.append((list(texts), list(references)))
        return [
            len(set(text.split()) & set(ref.split())) / len(set(ref.split()))
            for text, ref in zip(texts, references, strict=True)
        ]


class NoScorer:
    async def similarities(self, *, texts: Sequence[str], references: Sequence[str]) -> list[float]:
        raise SimilarityUnavailable("similarTo needs the golden extra")


async def handle(bus: Bus, event: Envelope, scorer: SimilarityScorer | None = None) -> None:
    async with SmokeHarness(request_timeout_s=5) as harness:
        handlers = SmokeHandlers(
            bus=bus, harness=harness, scorer=scorer or WordOverlap(), concurrency=2
        )
        await asyncio.wait_for(handlers.handle(event, DELIVERY), timeout=5)


async def test_a_current_saga_is_invoked_and_passes(
    nats_url: str, runner: tuple[Runner, str]
) -> None:
    fake, url = runner
    fake.open.set()
    bus = await Bus.open(nats_url, service="test")
    event = installed("current", url)
    await advance_latest_saga(bus, "default", "current", event.sagaid)
    await handle(bus, event)
    assert fake.calls == 3 + CONTRACT_INVOCATIONS
    assert await smoke_events(bus, "current") == [EventType.SMOKE_PASSED]
    await bus.close()


async def test_an_ended_saga_stops_its_invocations_and_publishes_nothing(
    nats_url: str, runner: tuple[Runner, str]
) -> None:
    _, url = runner  # never answers: waiting for the invocations would time out
    bus = await Bus.open(nats_url, service="test")
    event = installed("ended", url)
    failed = RunFailed(reason=Reason.INSTALL_FAILED, message="gone", phase=Phase.INSTALLING)
    assert await bus.publish_terminal(follow_up(event, EventType.RUN_FAILED, failed, source="t"))
    await handle(bus, event)
    assert await smoke_events(bus, "ended") == []
    await bus.close()


async def test_a_superseded_saga_fails_its_smoke_without_waiting_for_invocations(
    nats_url: str, runner: tuple[Runner, str]
) -> None:
    _, url = runner  # never answers
    bus = await Bus.open(nats_url, service="test")
    event = installed("old", url)
    await advance_latest_saga(bus, "default", "old", saga_id("default", "old", 2))
    await handle(bus, event)
    assert await smoke_events(bus, "old") == [EventType.SMOKE_FAILED]
    await bus.close()


class ReplyingRunner:
    """A canary that answers like the runner: ``output.reply`` quotes the review it got,
    and a review of ``"fail"`` gets a 500."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def invoke(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        review = body.get("review", "")
        if review == "fail":
            return web.json_response({"error": "step failed"}, status=500)
        reply = f"Thank you for your review: {review}"
        return web.json_response({"output": {"safety_check": {"ok": True}, "reply": reply}})


@pytest.fixture
async def replying() -> AsyncIterator[tuple[ReplyingRunner, str]]:
    runner = ReplyingRunner()
    async with serving_invoke(runner.invoke) as url:
        yield runner, url


def golden_case(name: str, review: str, **expect: Any) -> dict[str, Any]:
    return {"name": name, "input": {"review": review}, "expect": expect}


async def verdict_of(
    nats_url: str, url: str, cases: list[dict[str, Any]], scorer: SimilarityScorer
) -> tuple[EventType, SmokeFigures]:
    """The one verdict the smoke step publishes for a current saga with ``cases``."""
    bus = await Bus.open(nats_url, service="test")
    event = installed("golden", url, golden=cases)
    await advance_latest_saga(bus, "default", "golden", event.sagaid)
    await handle(bus, event, scorer)
    (verdict,) = await smoke_verdicts(bus, "golden")
    await bus.close()
    data: SmokeVerdict = verdict.payload()
    return verdict.event_type, data.figures


async def test_golden_cases_are_sent_to_the_canary_and_passing_ones_pass(
    nats_url: str, replying: tuple[ReplyingRunner, str]
) -> None:
    runner, url = replying
    cases = [
        golden_case("mentions-parking", "slow parking", contains=["parking"], matches="^Thank"),
        golden_case("close-to-reference", "great food", similarTo="review: great food"),
    ]
    scorer = WordOverlap()
    kind, figures = await verdict_of(nats_url, url, cases, scorer)
    assert kind is EventType.SMOKE_PASSED
    assert [(r.name, r.passed) for r in figures.golden] == [
        ("mentions-parking", True),
        ("close-to-reference", True),
    ]
    assert figures.golden[1].similarity == 1.0
    assert figures.reason.endswith("golden cases 2/2 passed")
    assert figures.invocations == 3  # the latency invocations are counted apart
    assert {"review": "slow parking"} in runner.bodies
    assert {"review": "great food"} in runner.bodies
    assert scorer.calls == [(["Thank you for your review: great food"], ["review: great food"])]


async def test_a_failing_golden_case_fails_the_smoke_naming_every_failed_case(
    nats_url: str, replying: tuple[ReplyingRunner, str]
) -> None:
    _, url = replying
    cases = [
        golden_case("passes", "slow parking", contains=["parking"]),
        golden_case("wrong-words", "slow parking", contains=["refund"], notContains=["slow"]),
        golden_case("canary-errors", "fail", contains=["x"]),
        golden_case("far-from-reference", "great food", similarTo="an apology for the mess"),
    ]
    kind, figures = await verdict_of(nats_url, url, cases, WordOverlap())
    assert kind is EventType.SMOKE_FAILED
    assert figures.reason.startswith("3 golden cases failed: wrong-words (")
    assert 'contains "refund" missing; notContains "slow" present' in figures.reason
    assert "canary-errors (no reply: HTTP 500" in figures.reason
    assert "far-from-reference (similarity 0.20 < 0.70)" in figures.reason
    assert "passes" not in figures.reason
    assert [r.passed for r in figures.golden] == [True, False, False, False]


async def test_similar_to_without_a_scorer_fails_the_case_saying_what_to_install(
    nats_url: str, replying: tuple[ReplyingRunner, str]
) -> None:
    _, url = replying
    cases = [
        golden_case("plain", "slow parking", contains=["parking"]),
        golden_case("semantic", "slow parking", similarTo="sorry about the parking"),
    ]
    kind, figures = await verdict_of(nats_url, url, cases, NoScorer())
    assert kind is EventType.SMOKE_FAILED
    assert figures.reason == (
        "golden case semantic failed: similarity not scored: similarTo needs the golden extra"
    )


class CountingRunner(ReplyingRunner):
    """Answers like ``ReplyingRunner`` after a moment, recording the most calls in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0
        self.most_in_flight = 0

    async def invoke(self, request: web.Request) -> web.Response:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.05)
        self.in_flight -= 1
        return await super().invoke(request)


async def test_golden_cases_share_the_concurrency_limit_of_the_invocations(
    nats_url: str,
) -> None:
    runner = CountingRunner()
    cases = [golden_case(f"case-{i}", "slow parking", contains=["parking"]) for i in range(3)]
    async with serving_invoke(runner.invoke) as url:
        kind, _ = await verdict_of(nats_url, url, cases, WordOverlap())
    assert kind is EventType.SMOKE_PASSED
    assert len(runner.bodies) == 6 + CONTRACT_INVOCATIONS  # 3 invocations and 3 cases
    assert runner.most_in_flight == 2  # the handler's concurrency


async def test_a_walks_later_copy_is_tested_alone_and_gets_a_verdict_of_its_own(
    nats_url: str,
) -> None:
    """East's copy passed its smoke test when the walk began; west's, installed when
    east's steps passed, is the only one called now, and its verdict is not taken for a
    duplicate of east's."""
    east, west = Runner(), Runner()
    east.open.set()
    west.open.set()
    async with serving_invoke(east.invoke) as east_url, serving_invoke(west.invoke) as west_url:
        bus = await Bus.open(nats_url, service="test")
        first = installed("walked", east_url)
        walk = first.payload().canary.model_copy(
            update={"backend": "east", "walk": ("east", "west")}
        )
        at_east = CanaryInstalled(run=first.payload().run, canary=walk, backend="east")
        first = follow_up(
            run_requested(at_east.run), EventType.CANARY_INSTALLED, at_east, source="t"
        )
        copy = SpreadRelease(backend="west", release="walked-g1-west", url=west_url)
        at_west = at_east.model_copy(
            update={"canary": walk.model_copy(update={"spread": (copy,)}), "backend": "west"}
        )
        later = follow_up(first, EventType.CANARY_INSTALLED, at_west, source="test")
        await advance_latest_saga(bus, "default", "walked", first.sagaid)
        await handle(bus, first)
        calls_on_east = east.calls
        await handle(bus, later)
        verdicts = await smoke_verdicts(bus, "walked")
        await bus.close()
    assert (east.calls, west.calls) == (calls_on_east, 3 + CONTRACT_INVOCATIONS)
    assert [(v.event_type, v.data["backend"]) for v in verdicts] == [
        (EventType.SMOKE_PASSED, "east"),
        (EventType.SMOKE_PASSED, "west"),
    ]
