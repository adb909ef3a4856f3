"""The chart's bus settings: ping interval and outstanding pings for every service, and
retention passed only when set (rendered like `helm template`)."""

from typing import Any

import pytest
from plnt_chart_kit import PLNT_CHART, container_env, render, select

from plnt_common.settings import CommonSettings

NAMESPACE = "plnt-system"
SERVICES = ("watcher", "puller", "installer", "smoke", "promoter", "router")
RETENTION = (
    "PLNT_EVENTS_MAX_AGE",
    "PLNT_EVENTS_MAX_BYTES",
    "PLNT_BUCKETS_MAX_BYTES",
    "PLNT_SAGAS_MAX_AGE",
)


def envs(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    docs = render(PLNT_CHART, values, namespace=NAMESPACE)
    return {
        doc["metadata"]["labels"]["app.kubernetes.io/component"]: container_env(doc)
        for doc in select(docs, "Deployment")
    }


def test_every_service_pings_its_node_every_five_seconds_and_keeps_no_retention_by_default() -> (
    None
):
    for service, env in envs({}).items():
        assert env["PLNT_NATS_PING_INTERVAL"] == "5s", service
        assert env["PLNT_NATS_MAX_OUTSTANDING_PINGS"] == "2", service
        assert not set(RETENTION) & env.keys(), f"{service}: a default would reset a limit"


def test_retention_values_reach_every_service_as_its_settings_read_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = {
        "natsPingInterval": "2s",
        "retention": {
            "eventsMaxAge": "90d",
            "eventsMaxBytes": "8GiB",
            "bucketsMaxBytes": 1048576,
            "sagasMaxAge": "120d",
        },
    }
    rendered = envs(values)
    assert set(rendered) >= set(SERVICES)
    for env in rendered.values():
        for name in (*RETENTION, "PLNT_NATS_PING_INTERVAL", "PLNT_NATS_MAX_OUTSTANDING_PINGS"):
            monkeypatch.setenv(name, env[name])
        settings = CommonSettings()
        assert settings.nats_ping_interval == 2.0
        assert settings.events_max_age == 90 * 86_400
        assert settings.events_max_bytes == 8 * 2**30
        assert settings.buckets_max_bytes == 2**20
        assert settings.sagas_max_age == 120 * 86_400


@pytest.mark.parametrize(
    "values",
    [
        {"retention": {"eventsMaxAge": "a month"}},
        {"natsPingInterval": 5},
        {"retention": {"eventsMaxBites": "1GiB"}},
    ],
    ids=["age-not-a-duration", "interval-without-unit", "unknown-key"],
)
def test_retention_values_the_services_would_refuse_are_refused_by_the_schema(
    values: dict[str, Any],
) -> None:
    with pytest.raises(Exception):  # noqa: B017, PT011 (the renderer's own schema error)
        render(PLNT_CHART, values, namespace=NAMESPACE)
