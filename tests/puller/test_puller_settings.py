"""``PullerSettings`` read from the environment as an operator (or the chart) sets it."""

import pytest

from plnt_puller.app import consumer_spec
from plnt_puller.settings import PullerSettings


def test_settings_read_the_puller_prefix_and_the_shared_nats_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PLNT_NATS_URL", "nats://bus:4222")
    monkeypatch.setenv("PLNT_PULLER_S3_ENDPOINT_URL", "http://minio:9000")
    monkeypatch.setenv("PLNT_PULLER_S3_REGION", "eu-west-1")
    monkeypatch.setenv("PLNT_PULLER_CONNECT_TIMEOUT_S", "2.5")
    monkeypatch.setenv("PLNT_PULLER_MAX_ATTEMPTS", "4")
    monkeypatch.setenv("PLNT_PULLER_RETRY_BACKOFF_S", "[1, 5, 30]")
    monkeypatch.setenv("PLNT_PULLER_CONCURRENCY", "2")

    settings = PullerSettings()

    assert settings.nats_url == "nats://bus:4222"
    assert settings.s3_endpoint_url == "http://minio:9000"
    assert settings.s3_region == "eu-west-1"
    assert settings.connect_timeout_s == 2.5
    spec = consumer_spec(settings)
    assert (spec.service, spec.max_attempts, spec.concurrency) == ("puller", 4, 2)
    assert spec.backoff_s == (1.0, 5.0, 30.0)
    assert spec.filters == ("plnt.evt.run.requested.>",)


def test_settings_default_to_aws_in_us_east_1(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PLNT_PULLER_S3_ENDPOINT_URL", "PLNT_PULLER_S3_REGION"):
        monkeypatch.delenv(name, raising=False)
    settings = PullerSettings()
    assert (settings.s3_endpoint_url, settings.s3_region) == (None, "us-east-1")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PLNT_PULLER_MAX_ATTEMPTS", "0"),
        ("PLNT_PULLER_RETRY_BACKOFF_S", "[]"),
        ("PLNT_PULLER_RETRY_BACKOFF_S", "[-1]"),
        ("PLNT_PULLER_READ_TIMEOUT_S", "0"),
    ],
    ids=["no-attempts", "no-backoff", "negative-backoff", "zero-timeout"],
)
def test_settings_refuse_values_that_cannot_work(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name.removeprefix("PLNT_PULLER_").lower()):
        PullerSettings()
