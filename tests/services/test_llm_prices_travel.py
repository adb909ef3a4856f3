"""The backend's llm prices and structured-output switch reach every runner: from
``PlntBackend.spec.llm`` through the installer's desired release to the local runner's
environment and the runner chart."""

import os
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from test_saga_logic import pulled

from plnt_common.errors import SpecInvalid
from plnt_common.resources import parse_resource
from plnt_installer import logic as installer
from plnt_installer.adapters.helm_values import chart_values, desired_from_values
from plnt_local_backend.adapters.runner_env import runner_env
from plnt_runner.settings import RunnerSettings

REPO = Path(__file__).resolve().parents[2]
RUNNER_CHART = REPO / "charts" / "plnt-runner"
WORKFLOW = REPO / "examples" / "registry" / "review-responder" / "1.2.0" / "workflow.yaml"
PRICED = {
    "baseUrl": "https://llm.example/v1",
    "model": "m",
    "inputPricePerMTokUsd": 0.15,
    "outputPricePerMTokUsd": 0.6,
    "structuredOutputs": True,
}


def test_the_local_runner_is_started_with_the_backends_prices(tmp_path: Path) -> None:
    desired = installer.desired_canary(pulled(replicas_min=1, llm=PRICED), saga_id="team.wf.3.1")
    env = runner_env(
        desired=desired, workflow_file=tmp_path / "w.yaml", host="127.0.0.1", port=0,
        owner_pid=None, base_env={},
    )  # fmt: skip
    read = _settings_from(env)
    assert (read.llm_input_price_per_mtok_usd, read.llm_output_price_per_mtok_usd) == (0.15, 0.6)
    assert read.llm_structured_outputs is True


def test_a_backend_without_prices_counts_calls_as_free(tmp_path: Path) -> None:
    llm = {"baseUrl": "https://llm.example/v1", "model": "m"}
    desired = installer.desired_canary(pulled(replicas_min=1, llm=llm), saga_id="team.wf.3.1")
    env = runner_env(
        desired=desired, workflow_file=tmp_path / "w.yaml", host="127.0.0.1", port=0,
        owner_pid=None, base_env={},
    )  # fmt: skip
    assert _settings_from(env).llm_input_price_per_mtok_usd == 0
    assert _settings_from(env).llm_structured_outputs is False


def test_the_runner_chart_sets_the_prices_and_the_release_reads_them_back() -> None:
    data = pulled(replicas_min=1, llm=PRICED)
    desired = installer.desired_canary(data, saga_id="team.wf.3.1").model_copy(
        update={"gpu_class": None, "gpu_count": 0}  # a backend without GPU classes
    )
    values = chart_values(
        release=desired,
        workflow=WORKFLOW.read_bytes(),
        backend_name="c",
        backend=data.backend,
        placement=None,
    )
    files = helm_python.Chart.load(RUNNER_CHART).render(
        values, name=desired.release, namespace="team", is_install=True, is_upgrade=False
    )
    docs: list[dict[str, Any]] = [
        doc
        for template, text in files.items()
        if not template.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    (deployment,) = [doc for doc in docs if doc["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {entry["name"]: entry.get("value") for entry in container["env"]}
    assert float(env["PLNT_RUNNER_LLM_INPUT_PRICE_PER_MTOK_USD"]) == 0.15
    assert float(env["PLNT_RUNNER_LLM_OUTPUT_PRICE_PER_MTOK_USD"]) == 0.6
    assert env["PLNT_RUNNER_LLM_STRUCTURED_OUTPUTS"] == "true"
    read_back = desired_from_values(name=desired.release, values=values)
    assert read_back is not None and read_back.llm == desired.llm


@pytest.mark.parametrize("price", [-0.5, "cheap"], ids=["negative", "not-a-number"])
def test_a_bad_price_is_refused_naming_the_field(price: Any) -> None:
    backend = {
        "apiVersion": "plnt.work/v1",
        "kind": "PlntBackend",
        "metadata": {"name": "gpu"},
        "spec": {"type": "local", "llm": {**PRICED, "outputPricePerMTokUsd": price}},
    }
    with pytest.raises(
        SpecInvalid, match=r"^PlntBackend 'gpu': spec\.llm\.outputPricePerMTokUsd: "
    ):
        parse_resource(backend)


def _settings_from(env: dict[str, str]) -> RunnerSettings:
    """The settings a runner started with exactly ``env`` reads."""
    with pytest.MonkeyPatch.context() as patch:
        for name in [name for name in os.environ if name.startswith("PLNT_")]:
            patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        return RunnerSettings()
