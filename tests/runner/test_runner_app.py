"""The runner's HTTP API on a real loopback port: /invoke (JSON and SSE), /healthz, /metrics."""

import asyncio
import importlib.util
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest
import yaml
from runner_support import (
    EXAMPLE_BODY,
    EXAMPLE_WORKFLOW,
    eventually,
    read_sse,
    running_runner,
    workflow_yaml,
    write_example,
)

from plnt_common.errors import SpecInvalid
from plnt_common.nats_server import free_port
from plnt_runner.app import create_app
from plnt_runner.settings import RunnerSettings
from plnt_testkit.fake_llm import FakeLLM

SSE = {"Accept": "text/event-stream"}


def settings_for(path: Path, **overrides: Any) -> RunnerSettings:
    return RunnerSettings(workflow_file=path, revision="rev-7", **overrides)


@pytest.fixture
def example_file(tmp_path: Path) -> Path:
    return write_example(tmp_path)


async def test_invoke_answers_the_documented_json_shape(example_file: Path) -> None:
    async with (
        running_runner(settings_for(example_file)) as (base, http, _),
        http.post(f"{base}/invoke", json=EXAMPLE_BODY) as response,
    ):
        assert response.status == 200
        assert response.headers["x-plnt-revision"] == "rev-7"
        body = await response.json()

    assert set(body) == {
        "workflow",
        "version",
        "revision",
        "provider",
        "duration_ms",
        "reply",
        "usage",
        "output",
        "steps",
    }
    assert (body["workflow"], body["version"], body["revision"]) == (
        "review-responder",
        "1.2.0",
        "rev-7",
    )
    assert body["provider"] == "offline"
    assert set(body["output"]) == {"safety_check", "reply"}
    assert body["output"]["reply"].startswith("[offline] Thank you")
    assert (
        body["reply"] == body["output"]["reply"] == body["steps"]["draft_reply"]["output"]["text"]
    )
    assert list(body["steps"]) == [
        "classify_intent",
        "retrieve_brand_voice",
        "draft_reply",
        "safety_check",
    ]
    for step in body["steps"].values():
        assert set(step) == {"output", "duration_ms", "cached", "usage"}
        assert step["cached"] is False
        assert step["usage"]["prompt_tokens"] > 0 and step["usage"]["completion_tokens"] > 0
    for field in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert body["usage"][field] == sum(s["usage"][field] for s in body["steps"].values())
    assert body["duration_ms"] >= max(s["duration_ms"] for s in body["steps"].values())


async def test_a_repeated_invocation_is_served_from_the_step_cache(example_file: Path) -> None:
    async with running_runner(settings_for(example_file)) as (base, http, _):
        for _ in range(2):
            async with http.post(f"{base}/invoke", json=EXAMPLE_BODY) as response:
                body = await response.json()
        async with http.get(f"{base}/healthz") as response:
            health = await response.json()
    assert all(step["cached"] for step in body["steps"].values())
    # Served from the cache, the steps spent no tokens this time.
    assert body["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert health["cache"]["hits"] == 4
    assert health["cache"]["hit_rate"] == 0.5


async def test_sse_streams_step_token_and_result_events(example_file: Path) -> None:
    async with (
        running_runner(settings_for(example_file)) as (base, http, _),
        http.post(f"{base}/invoke", json=EXAMPLE_BODY, headers=SSE) as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert response.headers["x-plnt-revision"] == "rev-7"
        events = [event async for event in read_sse(response)]

    names = [name for name, _ in events]
    assert names[-1] == "result"
    assert [d["step"] for n, d in events if n == "step"] == [
        "classify_intent",
        "retrieve_brand_voice",
        "draft_reply",
        "safety_check",
    ]
    tokens = [d for n, d in events if n == "token"]
    assert len(tokens) > 3
    assert {t["step"] for t in tokens} == {"draft_reply"}
    assert all(t["reply"] is True for t in tokens)  # draft_reply is the default reply step
    result = events[-1][1]
    assert "".join(t["delta"] for t in tokens).strip() == result["output"]["reply"]
    # Tokens of the draft arrive before the draft's own step event.
    assert names.index("token") < names.index("step", names.index("token"))


async def test_sse_events_are_flushed_as_steps_finish_not_at_the_end(example_file: Path) -> None:
    async with FakeLLM(latency_s=0.25) as llm:
        settings = settings_for(example_file, llm_base_url=llm.base_url)
        async with running_runner(settings) as (base, http, _):
            started = time.perf_counter()
            arrivals: list[tuple[str, float]] = []
            async with http.post(f"{base}/invoke", json=EXAMPLE_BODY, headers=SSE) as response:
                async for name, _ in read_sse(response):
                    arrivals.append((name, time.perf_counter() - started))
    first_step = next(t for n, t in arrivals if n == "step")
    result = next(t for n, t in arrivals if n == "result")
    assert result >= 4 * 0.25  # four LLM calls in a chain
    assert first_step < result - 0.5, arrivals


async def test_invoke_over_an_openai_compatible_endpoint_reports_the_provider(
    example_file: Path,
) -> None:
    async with FakeLLM(api_key="sk-1") as llm:  # schema-valid JSON where JSON is asked for
        settings = settings_for(
            example_file, llm_base_url=llm.base_url, llm_api_key="sk-1", llm_model="m"
        )
        async with (
            running_runner(settings) as (base, http, _),
            http.post(f"{base}/invoke", json=EXAMPLE_BODY) as response,
        ):
            body = await response.json()
        assert llm.request_count == 4
        assert {r.body["model"] for r in llm.received} == {"m"}
    assert response.status == 200
    assert body["provider"] == "openai"
    assert body["steps"]["classify_intent"]["output"] == {"label": "mixed"}
    assert body["output"]["safety_check"]["allowed"] is True


async def test_a_failing_step_answers_500_naming_it(example_file: Path) -> None:
    async with FakeLLM(fail_status=500) as llm:
        settings = settings_for(example_file, llm_base_url=llm.base_url)
        async with (
            running_runner(settings) as (base, http, _),
            http.post(f"{base}/invoke", json=EXAMPLE_BODY) as response,
        ):
            assert response.status == 500
            assert response.headers["x-plnt-revision"] == "rev-7"
            body = await response.json()
            async with http.post(f"{base}/invoke", json=EXAMPLE_BODY, headers=SSE) as response:
                events = [event async for event in read_sse(response)]
    assert body["step"] == "classify_intent"
    assert body["reason"] == "StepFailed"
    assert body["error"].startswith("step 'classify_intent' (llm.classify) failed: LLM endpoint")
    assert "answered 500" in body["error"]
    assert [name for name, _ in events] == ["error"]
    assert events[0][1]["step"] == "classify_intent"


async def test_http_request_to_a_closed_port_answers_500_naming_the_step(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/hook"
    path = tmp_path / "wf.yaml"
    path.write_bytes(
        workflow_yaml([{"id": "notify", "tool": "http.request", "with": {"url": url}}])
    )
    async with (
        running_runner(settings_for(path)) as (base, http, _),
        http.post(f"{base}/invoke", json={}) as response,
    ):
        body = await response.json()
    assert response.status == 500
    assert body["step"] == "notify"
    assert f"POST {url} failed" in body["error"]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"{not json", "body is not valid JSON"),
        (b"[1, 2]", "body must be a JSON object, got list"),
        (b"", "body is empty"),
        (b"\xff\xfe", "not UTF-8 JSON"),
        (b"[" * 200_000, "nests arrays and objects too deeply"),
    ],
    ids=["malformed", "array", "empty", "not-utf8", "200k-brackets"],
)
async def test_bad_bodies_answer_422_with_a_json_error(
    example_file: Path, data: bytes, problem: str
) -> None:
    async with (
        running_runner(settings_for(example_file)) as (base, http, _),
        http.post(f"{base}/invoke", data=data, headers=SSE) as response,
    ):
        assert response.status == 422
        assert response.headers["x-plnt-revision"] == "rev-7"
        body = await response.json()
    assert problem in body["error"]
    assert body["status"] == 422


async def test_oversized_bodies_answer_413_with_or_without_content_length(
    example_file: Path,
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b" " * 200

    async with (
        running_runner(settings_for(example_file, max_body_bytes=1000)) as (base, http, _),
        http.post(f"{base}/invoke", json={"review": "x" * 2000}) as response,
    ):
        assert response.status == 413
        assert "1000-byte limit" in (await response.json())["error"]
        async with http.post(f"{base}/invoke", data=chunks()) as response:  # chunked: no length
            assert response.status == 413
            assert (await response.json())["reason"] == "BodyTooLarge"
        async with http.post(f"{base}/invoke", json={"review": "fits"}) as response:
            assert response.status == 200


async def test_saturated_runner_answers_429_with_retry_after(example_file: Path) -> None:
    async with FakeLLM(latency_s=0.3) as llm:
        settings = settings_for(
            example_file, llm_base_url=llm.base_url, max_in_flight=1, max_queue=1
        )
        async with running_runner(settings) as (base, http, _app):

            async def invoke(n: int) -> int:
                async with http.post(f"{base}/invoke", json={"review": f"r{n}"}) as response:
                    return response.status

            async def health() -> dict[str, Any]:
                async with http.get(f"{base}/healthz") as response:
                    return dict(await response.json())

            first = asyncio.create_task(invoke(1))
            await eventually(lambda: _at_least(health(), "in_flight"))
            second = asyncio.create_task(invoke(2))
            await eventually(lambda: _at_least(health(), "waiting"))
            async with http.post(f"{base}/invoke", json={"review": "r3"}) as response:
                assert response.status == 429
                assert response.headers["Retry-After"] == "1"
                assert response.headers["x-plnt-revision"] == "rev-7"
                assert (await response.json())["reason"] == "Saturated"
            async with http.get(f"{base}/metrics") as response:
                assert 'plnt_queue_depth{component="runner"} 1.0' in await response.text()
            assert list(await asyncio.gather(first, second)) == [200, 200]


async def _at_least(health: Awaitable[dict[str, Any]], key: str) -> bool:
    return int((await health)[key]) >= 1


async def test_healthz_reports_the_loaded_workflow(example_file: Path) -> None:
    async with (
        running_runner(settings_for(example_file)) as (base, http, _),
        http.get(f"{base}/healthz") as response,
    ):
        assert response.status == 200
        assert response.headers["x-plnt-revision"] == "rev-7"
        body = await response.json()
    assert body["status"] == "ok"
    assert body["workflow"] == "review-responder"
    assert body["digest"].startswith("sha256:")
    assert len(body["digest"]) == 71
    assert body["provider"] == "offline"


async def test_metrics_expose_the_contract_metric_names(example_file: Path) -> None:
    async with (
        running_runner(settings_for(example_file)) as (base, http, _),
        http.post(f"{base}/invoke", json=EXAMPLE_BODY) as response,
    ):
        assert response.status == 200
        async with http.get(f"{base}/metrics") as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            text = await response.text()
    for sample in (
        'plnt_invocation_duration_seconds_bucket{le="0.001",revision="rev-7",status="ok",workflow="review-responder"}',
        'plnt_invocations_total{revision="rev-7",status="ok",workflow="review-responder"}',
        'plnt_step_duration_seconds_count{status="ok",step="draft_reply",tool="llm.generate",workflow="review-responder"}',
        'plnt_step_cache_requests_total{result="miss"}',
        'plnt_queue_depth{component="runner"}',
    ):
        assert sample in text, sample
    if importlib.util.find_spec("pynvml") is None:
        # No NVML: the gauge has no sample at all, rather than a misleading zero.
        assert "plnt_gpu_utilization_ratio{" not in text


async def test_cache_size_zero_disables_the_cache(example_file: Path) -> None:
    async with running_runner(settings_for(example_file, cache_size=0)) as (base, http, _):
        for _ in range(2):
            async with http.post(f"{base}/invoke", json=EXAMPLE_BODY) as response:
                body = await response.json()
        async with http.get(f"{base}/healthz") as response:
            health = await response.json()
    assert not any(step["cached"] for step in body["steps"].values())
    assert health["cache"] is None


def test_create_app_refuses_a_missing_or_invalid_workflow(tmp_path: Path) -> None:
    with pytest.raises(SpecInvalid, match=r"cannot read workflow file .*nope\.yaml"):
        create_app(settings_for(tmp_path / "nope.yaml"))
    cyclic = tmp_path / "cyclic.yaml"
    cyclic.write_bytes(
        workflow_yaml(
            [
                {"id": "a", "tool": "llm.classify", "deps": ["b"]},
                {"id": "b", "tool": "llm.classify", "deps": ["a"]},
            ]
        )
    )
    with pytest.raises(SpecInvalid, match="cycle"):
        create_app(settings_for(cyclic))


async def test_a_declared_reply_names_the_text_and_only_its_tokens_are_marked_reply(
    tmp_path: Path,
) -> None:
    path = tmp_path / "workflow.yaml"
    document = yaml.safe_load(EXAMPLE_WORKFLOW)
    document["spec"]["reply"] = {"step": "retrieve_brand_voice", "field": "guidance"}
    path.write_text(yaml.safe_dump(document))
    async with running_runner(settings_for(path)) as (base, http, _):
        async with http.post(f"{base}/invoke", json=EXAMPLE_BODY) as response:
            body = await response.json()
        async with http.post(
            f"{base}/invoke", json={**EXAMPLE_BODY, "review": "Cold coffee"}, headers=SSE
        ) as response:
            events = [event async for event in read_sse(response)]
    guidance = body["steps"]["retrieve_brand_voice"]["output"]["guidance"]
    assert body["reply"] == body["output"]["reply"] == guidance
    tokens = [data for name, data in events if name == "token"]
    assert tokens and {t["step"] for t in tokens} == {"draft_reply"}
    assert not any(t["reply"] for t in tokens)  # the draft streams, but it is not the reply
