"""The chart's tracing values: rendered as the standard OTEL_* variables on every plnt
Deployment, none at all without an endpoint, and refused by the schema when unusable."""

from typing import Any

import helm_python
import pytest
from plnt_chart_kit import PLNT_CHART, container_env, render, select, with_router_keys

from plnt_common import tracing

SERVICES = ("watcher", "puller", "installer", "smoke", "promoter", "router")


def deployment_envs(values: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    deployments = select(render(PLNT_CHART, with_router_keys(values)), "Deployment")
    return {
        d["metadata"]["labels"]["app.kubernetes.io/component"]: container_env(d)
        for d in deployments
    }


def test_without_an_endpoint_no_deployment_gets_an_otel_variable() -> None:
    envs = deployment_envs({"tracing": {"sampler": "traceidratio", "samplerArg": 0.1}})
    assert set(envs) == set(SERVICES)
    for service, env in envs.items():
        assert [name for name in env if name.startswith("OTEL_")] == [], service


def test_every_deployment_exports_its_traces_where_the_values_say() -> None:
    values = {
        "tracing": {
            "endpoint": "http://otel-collector.observability:4318",
            "sampler": "parentbased_traceidratio",
            "samplerArg": 0.25,
            "resourceAttributes": {"deployment.environment": "prod", "team": "agents"},
            "headersSecret": {"name": "otlp-auth", "key": "headers"},
        }
    }
    envs = deployment_envs(values)
    assert set(envs) == set(SERVICES)
    for service, env in envs.items():
        otel = {name: value for name, value in env.items() if name.startswith("OTEL_")}
        assert otel == {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4318",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.25",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,team=agents",
            "OTEL_EXPORTER_OTLP_HEADERS": {"secretKeyRef": {"name": "otlp-auth", "key": "headers"}},
        }, service
        # what each service's tracing set-up reads
        assert tracing.endpoint_from(otel) == "http://otel-collector.observability:4318"


def test_an_endpoint_alone_sets_the_endpoint_alone() -> None:
    envs = deployment_envs({"tracing": {"endpoint": "https://otlp.example.com"}})
    for service, env in envs.items():
        otel = {name: value for name, value in env.items() if name.startswith("OTEL_")}
        assert otel == {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otlp.example.com"}, service


@pytest.mark.parametrize(
    "values",
    [
        {"tracing": {"endpoint": "otel-collector:4318"}},
        {"tracing": {"sampler": "sometimes"}},
        {"tracing": {"resourceAttributes": {"replicas": 3}}},
        {"tracing": {"endpiont": "http://otel:4318"}},
    ],
    ids=["endpoint-without-scheme", "sampler", "attribute-not-a-string", "typo"],
)
def test_values_schema_rejects_unusable_tracing_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmValuesError):
        render(PLNT_CHART, with_router_keys(values))
