"""Shadow traffic on the real embedded stack: live load through the router, the router
mirroring calls to the canary and publishing pairs, the promoter judging them, every
service its own process."""

import contextlib
import copy
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web
from canary_load import LIVE_BODY, Load
from stack_support import Client, publish_spec, run_document, workflow_named

from plnt_cli.shadow import shadow_report
from plnt_common.events import EventType
from plnt_common.nats_server import free_port

STABLE, CANARY = "1.0.0-g1", "2.0.0-g2"


def shadowed(document: dict[str, Any], **shadow: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    changed["spec"]["workflow"]["ref"] = changed["spec"]["workflow"]["ref"].replace(
        "@1.0.0", "@2.0.0"
    )
    changed["spec"]["canary"]["shadow"] = shadow
    return changed


async def test_a_canary_answering_as_the_stable_does_passes_its_shadow_phase_unseen_by_callers(
    client: Client, registry: Path
) -> None:
    name = "shadow-good"
    publish_spec(registry, workflow_named(name))
    publish_spec(registry, workflow_named(name, "2.0.0"))
    document = run_document(name, registry=registry)
    await client.apply(document)
    await client.wait_phase(name, "Ready")
    endpoint = (await client.status(name))["endpoint"]
    load = Load(endpoint, concurrency=4)
    async with load.running():
        # the offline runner answers in milliseconds, where a busy test machine's jitter
        # alone moves a p95 ratio: this test is about the answers and who serves callers
        await client.apply(
            shadowed(document, percent=50, calls=20, maxDuration="60s", compare={"maxP95Ratio": 50})
        )
        shadowing = await client.wait_phase(name, "Shadowing", generation=2)
        body = await client.wait_phase(name, "Ready", generation=2, timeout_s=90)
    assert shadowing["status"]["canary"]["trafficPercent"] == 0
    figures = body["status"]["shadow"]
    assert (figures["pairs"], figures["passed"]) == (20, True), figures
    assert figures["similarity"] >= 0.85 and figures["noisePairs"] >= 1
    assert body["status"]["revision"] == CANARY
    assert shadow_report(body).startswith(f"workflowrun/{name}: shadow passed: 20 pairs")

    events = [e for e in await client.events(name) if e.sagaid == f"default.{name}.2.1"]
    kinds = [e.event_type for e in events]
    assert kinds.count(EventType.SHADOW_STARTED) == kinds.count(EventType.SHADOW_PASSED) == 1
    assert EventType.SHADOW_FAILED not in kinds and kinds[-1] is EventType.RUN_READY
    # until the verdict every caller got the stable's answer: the canary took no live call
    passed_at = next(e for e in events if e.event_type is EventType.SHADOW_PASSED).time
    started_at = next(e for e in events if e.event_type is EventType.SHADOW_STARTED).time
    wall = time.time() - time.monotonic()  # the calls' monotonic times, as wall clock
    during = [
        c
        for c in load.calls
        if started_at.timestamp() + 0.5 <= wall + c.started
        and wall + c.ended <= passed_at.timestamp()
    ]
    assert during, "no live call while shadowing"
    # and none before it either: the smoke test's share is not taken from callers
    before_verdict = [c for c in load.calls if wall + c.ended <= passed_at.timestamp()]
    assert {(c.status, c.revision) for c in before_verdict} == {(200, STABLE)}


async def test_a_canary_answering_otherwise_fails_its_shadow_phase_naming_the_figure(
    client: Client, registry: Path
) -> None:
    name = "shadow-bad"
    publish_spec(registry, workflow_named(name))
    other = [
        {
            "id": "label",
            "tool": "llm.classify",
            "with": {"prompt": "{{ input.review | default('') }}", "labels": ["yes", "no"]},
        }
    ]
    publish_spec(registry, workflow_named(name, "2.0.0", steps=other))
    document = run_document(name, registry=registry)
    await client.apply(document)
    await client.wait_phase(name, "Ready")
    endpoint = (await client.status(name))["endpoint"]
    async with Load(endpoint, concurrency=4).running():
        await client.apply(shadowed(document, percent=50, calls=10, maxDuration="60s"))
        body = await client.wait_phase(name, "RolledBack", generation=2, timeout_s=90)
    status = body["status"]
    figures = status["shadow"]
    assert figures["passed"] is False and figures["pairs"] == 10, figures
    assert figures["reason"].startswith(f"median similarity {figures['similarity']:.2f} < 0.85")
    assert f"shadow failed: {figures['reason']}" in status["message"]
    assert status["revision"] == STABLE
    assert (
        figures["examples"] and figures["examples"][0]["canary"] != figures["examples"][0]["stable"]
    )


@contextlib.asynccontextmanager
async def notification_sink() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A real HTTP endpoint standing for the email service: every POST it receives."""
    received: list[dict[str, Any]] = []

    async def post(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.json_response({"queued": True})

    app = web.Application()
    app.router.add_post("/notify", post)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/notify", received
    finally:
        await runner.cleanup()


def notifying(name: str, version: str, url: str) -> dict[str, Any]:
    """The example workflow, plus a step that POSTs the drafted reply to ``url``."""
    document = workflow_named(name, version)
    steps = document["spec"]["steps"]
    steps.append(
        {"id": "notify", "tool": "http.request", "deps": ["safety_check"], "with": {"url": url}}
    )
    return document


async def test_a_side_effect_step_runs_once_per_live_call_and_never_for_a_mirrored_one(
    client: Client, registry: Path
) -> None:
    """The flagship promise: a mirrored call reaches the canary's side-effect step, which
    sends nothing (it answers its dry run), while the stable's live call sends as usual; the
    intended calls still compare equal, so the phase passes on them."""
    name = "shadow-effects"
    async with notification_sink() as (url, received):
        publish_spec(registry, notifying(name, "1.0.0", url))
        publish_spec(registry, notifying(name, "2.0.0", url))
        document = run_document(name, registry=registry)
        await client.apply(document)
        await client.wait_phase(name, "Ready")
        endpoint = (await client.status(name))["endpoint"]
        load = Load(endpoint, concurrency=4)
        async with load.running():
            await client.apply(
                shadowed(
                    document, percent=50, calls=12, maxDuration="60s", compare={"maxP95Ratio": 50}
                )
            )
            body = await client.wait_phase(name, "Ready", generation=2, timeout_s=90)
    figures = body["status"]["shadow"]
    assert (figures["pairs"], figures["passed"]) == (12, True), figures
    assert figures["toolCallDiffPercent"] == 0, figures
    review = LIVE_BODY["review"]
    live_posts = [p for p in received if p["input"].get("review") == review]
    answered = [c for c in load.calls if c.status == 200]
    # each answered live call sent exactly one notification: none for its 12+ mirrors
    assert len(live_posts) == len(answered), (len(live_posts), len(answered))


async def test_a_canary_calling_its_side_effect_tool_otherwise_fails_on_the_tool_calls(
    client: Client, registry: Path
) -> None:
    """Same answers, but the new version would notify another address: the intended calls
    differ from the stable's by input, and the phase fails naming that figure."""
    name = "shadow-other-effects"
    async with notification_sink() as (url, received):
        publish_spec(registry, notifying(name, "1.0.0", url))
        publish_spec(registry, notifying(name, "2.0.0", f"{url}?to=everyone"))
        document = run_document(name, registry=registry)
        await client.apply(document)
        await client.wait_phase(name, "Ready")
        endpoint = (await client.status(name))["endpoint"]
        async with Load(endpoint, concurrency=4).running():
            await client.apply(
                shadowed(
                    document, percent=50, calls=12, maxDuration="60s", compare={"maxP95Ratio": 50}
                )
            )
            body = await client.wait_phase(name, "RolledBack", generation=2, timeout_s=90)
    figures = body["status"]["shadow"]
    assert figures["passed"] is False and figures["toolCallDiffPercent"] > 2, figures
    # judged at N pairs or stopped early once no remaining pair could bring it under budget
    assert "maxToolCallDiffPercent" in figures["reason"], figures["reason"]
    assert body["status"]["revision"] == STABLE
    # the canary sent only for its smoke test (direct calls, not mirrored): never a live input
    from_canary = [p for p in received if "everyone" in p["with"]["url"]]
    assert from_canary and all(p["input"] != LIVE_BODY for p in from_canary)
