"""The runner chart's tracing values, and the installer passing its own on: a runner a
traced control plane installs exports its spans where the control plane does, and one an
untraced control plane installs sets no OTEL_* variable."""

from typing import Any

import helm_python
import pytest
from plnt_chart_kit import RUNNER_CHART, container_env, one, render

from plnt_common import tracing
from plnt_installer.adapters.runner_tracing import runner_tracing


def otel_env(values: dict[str, Any]) -> dict[str, Any]:
    env = container_env(one(render(RUNNER_CHART, values), "Deployment"))
    return {k: v for k, v in env.items() if k.startswith(("OTEL_", "PLNT_TRACE_"))}


def test_without_an_endpoint_a_runner_gets_no_otel_variable() -> None:
    assert otel_env({}) == {}
    assert otel_env({"tracing": {"sampler": "always_on", "content": True}}) == {}


def test_a_runner_exports_where_its_values_say() -> None:
    values = {
        "tracing": {
            "endpoint": "http://otel-collector.observability:4318",
            "sampler": "parentbased_traceidratio",
            "samplerArg": 0.5,
            "resourceAttributes": {"deployment.environment": "prod"},
            "content": True,
        }
    }
    assert otel_env(values) == {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4318",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.5",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod",
        "PLNT_TRACE_CONTENT": "true",
    }


def test_the_installer_passes_its_own_tracing_settings_to_the_runner() -> None:
    installer_env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces",
        "OTEL_TRACES_SAMPLER": "traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.1",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=staging, team=agents",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer secret",
    }
    env = otel_env({"tracing": runner_tracing(installer_env)})
    assert env == {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
        "OTEL_TRACES_SAMPLER": "traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.1",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=staging,team=agents",
    }
    # the runner's tracing set-up sends to the same URL as the installer's
    assert tracing.endpoint_from(env) + "/v1/traces" == "http://collector:4318/v1/traces"


@pytest.mark.parametrize(
    "installer_env",
    [{}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}],
)
def test_an_untraced_installer_installs_untraced_runners(installer_env: dict[str, str]) -> None:
    assert otel_env({"tracing": runner_tracing(installer_env)}) == {}


def test_the_schema_refuses_an_unknown_sampler() -> None:
    with pytest.raises(helm_python.HelmError, match="sampler"):
        render(RUNNER_CHART, {"tracing": {"endpoint": "http://c:4318", "sampler": "sometimes"}})
