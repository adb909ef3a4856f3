"""Each call's LLM spend: the runner counts tokens and cost at the backend's prices as
Prometheus counters and tells the router in two answer headers."""

from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from runner_support import read_sse, running_runner, workflow_yaml

from plnt_runner.settings import RunnerSettings

# Two llm.generate steps: the offline provider's usage is one token per word, as reported.
STEPS = [
    {"id": "draft", "tool": "llm.generate", "with": {"prompt": "write a short polite reply"}},
    {"id": "polish", "tool": "llm.generate", "deps": ["draft"]},
]


def settings_for(tmp_path: Path, *, name: str, revision: str) -> RunnerSettings:
    path = tmp_path / "workflow.yaml"
    path.write_bytes(workflow_yaml(STEPS, name=name))
    return RunnerSettings(
        workflow_file=path,
        revision=revision,
        llm_input_price_per_mtok_usd=2.0,
        llm_output_price_per_mtok_usd=10.0,
        cache_size=0,
    )


def counted(metric: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(metric, labels) or 0.0


async def test_a_json_answer_carries_its_tokens_and_cost_and_the_counters_add_them(
    tmp_path: Path,
) -> None:
    settings = settings_for(tmp_path, name="spend-json", revision="spend-json-r1")
    async with running_runner(settings) as (url, http, _):
        async with http.post(f"{url}/invoke", json={"text": "hello there"}) as response:
            assert response.status == 200
            usage = (await response.json())["usage"]
            tokens_header = response.headers["x-plnt-tokens"]
            cost_header = float(response.headers["x-plnt-cost-usd"])
        async with http.post(f"{url}/invoke", json={"text": "hello there"}) as response:
            assert response.status == 200
    prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
    assert prompt > 0 and completion > 0
    assert tokens_header == f"{prompt},{completion}"
    assert cost_header == pytest.approx((prompt * 2.0 + completion * 10.0) / 1e6)
    labels = {"workflow": "spend-json", "revision": "spend-json-r1"}
    assert counted("plnt_llm_tokens_total", kind="prompt", **labels) == 2 * prompt
    assert counted("plnt_llm_tokens_total", kind="completion", **labels) == 2 * completion
    assert counted("plnt_llm_cost_usd_total", **labels) == pytest.approx(2 * cost_header)


async def test_a_streamed_answer_is_counted_by_the_runner_itself(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, name="spend-sse", revision="spend-sse-r1")
    async with (
        running_runner(settings) as (url, http, _),
        http.post(
            f"{url}/invoke", json={"text": "hi"}, headers={"Accept": "text/event-stream"}
        ) as response,
    ):
        assert "x-plnt-tokens" not in response.headers  # sent before any token was spent
        events = [event async for event in read_sse(response)]
    result = next(data for kind, data in events if kind == "result")
    labels = {"workflow": "spend-sse", "revision": "spend-sse-r1"}
    assert (
        counted("plnt_llm_tokens_total", kind="prompt", **labels)
        == (result["usage"]["prompt_tokens"])
    )
    assert counted("plnt_llm_cost_usd_total", **labels) > 0


def test_prices_read_from_the_environment_and_a_negative_price_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLNT_RUNNER_WORKFLOW_FILE", str(tmp_path / "w.yaml"))
    monkeypatch.setenv("PLNT_RUNNER_LLM_INPUT_PRICE_PER_MTOK_USD", "0.15")
    assert RunnerSettings().llm_input_price_per_mtok_usd == 0.15
    monkeypatch.setenv("PLNT_RUNNER_LLM_OUTPUT_PRICE_PER_MTOK_USD", "-1")
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        RunnerSettings()
