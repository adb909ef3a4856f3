"""The JSON endpoints, the server-sent events stream and the token check the pages use."""

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from console_support import TOKEN, Console

from plnt_common.bus.bus import message_id
from plnt_common.errors import PlntError
from plnt_common.events import RunSnapshot
from plnt_common.figures import RevisionTotals, RouterFigures
from plnt_common.projection import RunProjection, run_key
from plnt_common.resources import (
    CanaryStatus,
    ShadowExample,
    ShadowStatus,
    WorkflowRunSpec,
    WorkflowRunStatus,
)
from plnt_common.status import Phase
from plnt_common.subjects import event_subject, router_figures_subject
from plnt_console.guard import check_bind
from plnt_testkit.events import run_requested

WAIT_S = 5.0


def projection(name: str, phase: Phase, *, weight: int = 0) -> RunProjection:
    return RunProjection(
        namespace="default",
        name=name,
        saga_id=f"default.{name}.1.1",
        generation=1,
        status=WorkflowRunStatus(
            phase=phase,
            revision="1.0.0-g1",
            canary=CanaryStatus(revision="1.0.1-g2", trafficPercent=weight),
        ),
    )


async def put_run(console: Console, run: RunProjection) -> None:
    await console.bus.runs.put(run_key(run.namespace, run.name), run.model_dump_json().encode())


async def sse_messages(response: aiohttp.ClientResponse) -> Any:
    """(event, data) of each frame, as the browser's EventSource reads them."""
    event, data = "", ""
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data = line.removeprefix("data: ")
        elif not line and event:
            yield event, json.loads(data)
            event, data = "", ""


async def next_matching(stream: Any, event: str, matches: Any) -> dict[str, Any]:
    async def find() -> dict[str, Any]:
        async for name, data in stream:
            if name == event and matches(data):
                return dict(data)
        raise AssertionError(f"the stream ended before a matching {event!r} event")

    try:
        return await asyncio.wait_for(find(), timeout=WAIT_S)
    except TimeoutError:
        raise AssertionError(f"no matching {event!r} event within {WAIT_S}s") from None


async def wait_for_run(console: Console, name: str) -> None:
    for _ in range(100):
        if f"default.{name}" in console.board.runs:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never reached the console's board")


async def test_runs_are_listed_as_json_with_phase_revision_and_canary_weight(
    console: Console,
) -> None:
    await put_run(console, projection("alpha", Phase.PROGRESSING, weight=25))
    await wait_for_run(console, "alpha")
    async with console.http.get(f"{console.url}/api/runs") as response:
        assert response.status == 200
        runs = (await response.json())["runs"]
    assert [(r["name"], r["phase"], r["revision"], r["canaryWeight"]) for r in runs] == [
        ("alpha", "Progressing", "1.0.0-g1", 25)
    ]


async def test_the_event_stream_sends_the_state_then_each_change_as_it_happens(
    console: Console,
) -> None:
    await put_run(console, projection("beta", Phase.INSTALLING))
    await wait_for_run(console, "beta")
    async with console.http.get(f"{console.url}/api/events") as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        stream = sse_messages(response)
        first = await next_matching(stream, "runs", lambda data: True)
        assert [run["phase"] for run in first["runs"]] == ["Installing"]
        await put_run(console, projection("beta", Phase.READY))
        changed = await next_matching(stream, "run", lambda data: data["name"] == "beta")
        assert changed["phase"] == "Ready"


async def test_router_figures_become_per_revision_rate_quantiles_and_errors_on_the_stream(
    console: Console,
) -> None:
    subject = router_figures_subject("default", "gamma")

    def totals(calls: int, errors: int) -> RouterFigures:
        buckets = ((0.1, calls // 2), (0.5, calls), (float("inf"), calls))
        revision = RevisionTotals(invocations=calls, errors=errors, latency_buckets=buckets)
        return RouterFigures(
            router="r1", namespace="default", name="gamma", revisions={"g2": revision}
        )

    async with console.http.get(f"{console.url}/api/events") as response:
        stream = sse_messages(response)
        await console.bus.nc.publish(subject, totals(10, 0).model_dump_json().encode())
        await console.bus.nc.flush()
        await asyncio.sleep(0.2)  # a window needs two readings apart in time
        await console.bus.nc.publish(subject, totals(30, 5).model_dump_json().encode())
        found = await next_matching(
            stream, "figures", lambda data: "g2" in data["figures"].get("default.gamma", {})
        )
    window = found["figures"]["default.gamma"]["g2"]
    assert window["invocations"] == 20
    assert window["errorPercent"] == pytest.approx(25.0)
    assert 0 < window["p50Ms"] <= 100 < window["p95Ms"] <= 500
    assert window["rate"] > 0


async def test_an_operation_on_an_unknown_run_answers_404_with_the_clis_words(
    console: Console,
) -> None:
    async with console.http.post(f"{console.url}/api/runs/default/nope/rollback") as response:
        assert response.status == 404
        assert (
            "workflowruns 'nope' not found in namespace 'default'"
            in (await response.json())["error"]
        )
    async with console.http.post(f"{console.url}/api/runs/default/nope/explode") as response:
        assert response.status == 404
        assert "unknown operation 'explode'" in (await response.json())["error"]


async def test_a_timeline_of_a_run_without_events_says_so(console: Console) -> None:
    async with console.http.get(f"{console.url}/api/runs/default/nope/timeline") as response:
        assert response.status == 404
        assert (await response.json())["error"] == "no events for default/nope in the stream"


async def test_the_playground_refuses_a_run_without_an_endpoint(console: Console) -> None:
    await put_run(console, projection("delta", Phase.INSTALLING))
    await wait_for_run(console, "delta")
    url = f"{console.url}/api/runs/default/delta/invoke"
    async with console.http.post(url, data=b"{}") as response:
        assert response.status == 409
        assert "has no endpoint yet (phase Installing)" in (await response.json())["error"]


async def test_the_page_and_its_modules_are_served_by_the_console_itself(console: Console) -> None:
    async with console.http.get(f"{console.url}/") as response:
        page = await response.text()
    assert response.status == 200 and 'src="/static/console.js"' in page
    assert "http://" not in page and "https://" not in page  # no CDN
    for path in ("/static/console.js", "/static/console.css"):
        async with console.http.get(f"{console.url}{path}") as response:
            assert response.status == 200, path


async def test_a_token_is_asked_of_every_request_but_the_health_check(
    guarded_console: Console,
) -> None:
    url = guarded_console.url
    http = guarded_console.http
    async with http.get(f"{url}/api/runs") as response:
        assert response.status == 401
        assert "PLNT_CONSOLE_TOKEN" in (await response.json())["error"]
    async with http.get(f"{url}/api/runs", headers={"Authorization": "Bearer wrong"}) as response:
        assert response.status == 401
    async with http.get(f"{url}/healthz") as response:
        assert response.status == 200
    async with http.get(
        f"{url}/api/runs", headers={"Authorization": f"Bearer {TOKEN}"}
    ) as response:
        assert response.status == 200
    async with http.get(f"{url}/?token={TOKEN}") as response:
        assert response.status == 200
    async with http.get(f"{url}/api/runs") as response:  # the cookie the page got
        assert response.status == 200


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_loopback_needs_no_token(host: str) -> None:
    check_bind(host, "")


def test_another_address_needs_a_token() -> None:
    with pytest.raises(PlntError, match=r"refuses to listen on 0\.0\.0\.0 without a token"):
        check_bind("0.0.0.0", "")
    check_bind("0.0.0.0", TOKEN)


async def test_a_run_the_store_does_not_hold_is_answered_from_its_projection(
    console: Console,
) -> None:
    """On Kubernetes the API server holds the objects: the run page's status panels read
    the run's status from plnt-runs instead."""
    shadow = ShadowStatus(
        pairs=3, similarity=0.5, examples=(ShadowExample(input="{}", stable="a", canary="b"),)
    )
    run = projection("epsilon", Phase.PROGRESSING)
    run = run.model_copy(update={"status": run.status.model_copy(update={"shadow": shadow})})
    await put_run(console, run)
    async with console.http.get(f"{console.url}/api/runs/default/epsilon") as response:
        assert response.status == 200
        body = await response.json()
    assert body["metadata"] == {"namespace": "default", "name": "epsilon"}
    assert body["status"]["phase"] == "Progressing"
    assert body["status"]["shadow"]["similarity"] == 0.5
    assert body["status"]["shadow"]["examples"][0]["canary"] == "b"
    await put_run(console, projection("zeta", Phase.READY).model_copy(update={"removed": True}))
    for gone in ("nobody", "zeta"):  # never there; removed (its entry lingers a while)
        async with console.http.get(f"{console.url}/api/runs/default/{gone}") as response:
            assert response.status == 404, gone
            assert (await response.json())["error"] == (
                f"workflowruns {gone!r} not found in namespace 'default'"
            )


async def test_each_saga_on_the_timeline_names_the_trace_its_events_carry(
    console: Console,
) -> None:
    workflow = {"ref": "wf@1.0.0", "registry": "file:///registry"}
    spec = WorkflowRunSpec.model_validate({"workflow": workflow, "backend": {"cluster": "local"}})
    traces = {1: "4bf92f3577b34da6a3ce929d0e0e4736", 2: ""}  # the second saga: tracing off
    for generation, trace in traces.items():
        envelope = run_requested(
            RunSnapshot(namespace="default", name="traced", generation=generation, spec=spec)
        )
        headers = {"Nats-Msg-Id": message_id(envelope)}
        if trace:
            headers["traceparent"] = f"00-{trace}-00f067aa0ba902b7-01"
        subject = event_subject(envelope.event_type, "default", "traced")
        await console.bus.js.publish(subject, envelope.model_dump_json().encode(), headers=headers)
    url = f"{console.url}/api/runs/default/traced/timeline"
    async with console.http.get(url) as response:
        assert response.status == 200
        sagas = (await response.json())["sagas"]
    assert [(s["sagaId"], s["traceId"]) for s in sagas] == [
        ("default.traced.1.1", traces[1]),
        ("default.traced.2.1", ""),
    ]
    assert [row["step"] for row in sagas[0]["steps"]] == ["run.requested"]
