"""Shadow traffic on the real embedded stack: live load through the router, the router
mirroring calls to the canary and publishing pairs, the promoter judging them, every
service its own process."""

import copy
import time
from pathlib import Path
from typing import Any

from canary_load import Load
from stack_support import Client, publish_spec, run_document, workflow_named

from plnt_cli.shadow import shadow_report
from plnt_common.events import EventType

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
    assert {(c.status, c.revision) for c in during} == {(200, STABLE)}


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
