"""The chart's bus settings: ping interval and outstanding pings for every service, and
retention from events.* / buckets.* / sagas.* (events.maxAge 30d by default, the others
passed only when set; rendered like `helm template`)."""

from typing import Any

import pytest
from plnt_chart_kit import PLNT_CHART, container_env, render, select, with_router_keys

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
    docs = render(PLNT_CHART, with_router_keys(values), namespace=NAMESPACE)
    return {
        doc["metadata"]["labels"]["app.kubernetes.io/component"]: container_env(doc)
        for doc in select(docs, "Deployment")
    }


def test_every_service_pings_its_node_every_five_seconds_and_keeps_events_thirty_days() -> None:
    rendered = envs({})
    assert set(rendered) == set(SERVICES)
    for service, env in rendered.items():
        assert env["PLNT_NATS_PING_INTERVAL"] == "5s", service
        assert env["PLNT_NATS_MAX_OUTSTANDING_PINGS"] == "2", service
        assert env["PLNT_EVENTS_MAX_AGE"] == "30d", service
        unset = set(RETENTION) - {"PLNT_EVENTS_MAX_AGE"}
        assert not unset & env.keys(), f"{service}: a default would reset a limit"


def test_events_max_age_null_is_not_passed_so_a_limit_set_on_nats_stays() -> None:
    for service, env in envs({"events": {"maxAge": None}}).items():
        assert not set(RETENTION) & env.keys(), service


def test_retention_values_reach_every_service_as_its_settings_read_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = {
        "natsPingInterval": "2s",
        "events": {"maxAge": "90d", "maxBytes": "8GiB"},
        "buckets": {"maxBytes": 1048576},
        "sagas": {"maxAge": "120d"},
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


def test_the_older_retention_keys_still_win_when_set() -> None:
    values = {"events": {"maxAge": "90d"}, "retention": {"eventsMaxAge": "7d", "sagasMaxAge": "8d"}}
    for env in envs(values).values():
        assert env["PLNT_EVENTS_MAX_AGE"] == "7d"
        assert env["PLNT_SAGAS_MAX_AGE"] == "8d"


@pytest.mark.parametrize(
    "values",
    [
        {"events": {"maxAge": "a month"}},
        {"buckets": {"maxBytes": "1 gigabyte"}},
        {"events": {"maxBites": "1GiB"}},
        {"retention": {"eventsMaxAge": "a month"}},
        {"natsPingInterval": 5},
        {"retention": {"eventsMaxBites": "1GiB"}},
    ],
    ids=[
        "age-not-a-duration",
        "size-not-a-size",
        "unknown-events-key",
        "old-age-not-a-duration",
        "interval-without-unit",
        "unknown-key",
    ],
)
def test_retention_values_the_services_would_refuse_are_refused_by_the_schema(
    values: dict[str, Any],
) -> None:
    with pytest.raises(Exception):  # noqa: B017, PT011 (the renderer's own schema error)
        render(PLNT_CHART, with_router_keys(values), namespace=NAMESPACE)
