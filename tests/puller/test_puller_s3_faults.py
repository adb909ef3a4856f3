"""S3 slow or resetting mid-download: bounded retries, then Failed with the reason."""

import time
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import pytest
from puller_support import PullerUnderTest, S3Source, run_snapshot, workflow_yaml

from plnt_common.events import EventType, RunFailed
from plnt_common.status import Reason
from plnt_testkit.tcp_proxy import FaultProxy


@pytest.fixture
async def proxy(s3_endpoint: str) -> AsyncIterator[FaultProxy]:
    upstream = urlparse(s3_endpoint)
    async with FaultProxy(
        upstream_host=upstream.hostname or "127.0.0.1", upstream_port=upstream.port or 80
    ) as running:
        yield running


@pytest.mark.parametrize(
    ("mode", "settings"),
    [
        ("reset", {"s3_max_attempts": 2, "read_timeout_s": 5.0}),
        ("slow", {"s3_max_attempts": 2, "read_timeout_s": 0.5}),
    ],
    ids=["resetting-mid-download", "slower-than-the-read-timeout"],
)
async def test_a_failing_s3_download_is_retried_a_bounded_number_of_times_then_fails(
    puller: PullerUnderTest,
    s3_source: S3Source,
    proxy: FaultProxy,
    mode: str,
    settings: dict[str, float],
) -> None:
    s3_source.publish(
        workflow_yaml() + b"\n# padding so the body spans several packets\n" + b"#" * 8192
    )
    proxy.mode = mode  # type: ignore[assignment]
    proxy.delay_s = 2.0
    proxy.reset_after_bytes = 600  # past the headers, inside the body
    await puller.stop()
    puller.start(s3_endpoint_url=proxy.url, max_attempts=2, connect_timeout_s=0.5, **settings)
    started = time.monotonic()
    request = await puller.request(run_snapshot(registry=s3_source.url))

    outcome = await puller.outcome(request, timeout_s=60)

    assert outcome.event_type is EventType.RUN_FAILED
    failure = outcome.payload()
    assert isinstance(failure, RunFailed)
    assert failure.reason is Reason.REGISTRY_UNAVAILABLE
    assert "after 2 attempts" in failure.message
    assert time.monotonic() - started < 45
    assert proxy.connections >= 2  # it did retry
    if mode == "reset":
        assert proxy.resets >= 2
    assert await puller.events_of(EventType.SPEC_PULLED) == []


async def test_a_download_that_recovers_is_pulled(
    puller: PullerUnderTest, s3_source: S3Source, proxy: FaultProxy
) -> None:
    s3_source.publish(workflow_yaml())
    await puller.stop()
    puller.start(s3_endpoint_url=proxy.url)
    request = await puller.request(run_snapshot(registry=s3_source.url))
    assert (await puller.outcome(request)).event_type is EventType.SPEC_PULLED
