"""Fixtures for the puller tests: real registries, a real moto S3 server, the real service.

Nothing is mocked: ``file://`` registries are directories under ``tmp_path``, ``s3://``
registries are buckets on moto's S3 server (over HTTP, through boto3), and the puller runs
as ``app.run`` against the per-test nats-server from the top-level conftest. Tests read
what it published straight from the stream.
"""

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from puller_support import FileSource, OciSource, PullerUnderTest, S3Source, SpecSource

from plnt_common.bus.bus import Bus
from plnt_puller.settings import PullerSettings
from plnt_testkit.moto_s3 import moto_s3_server
from plnt_testkit.oci_registry import (
    MISSING,
    REGISTRY_BINARY,
    OciRegistryServer,
    oci_registry_server,
)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fixed dummy credentials, and no AWS config from the machine running the tests."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def s3_endpoint(aws_env: None) -> Iterator[str]:
    """A real S3 API (moto's server) on a free loopback port, empty for each test."""
    with moto_s3_server() as endpoint:
        yield endpoint


@pytest.fixture
def s3_client(s3_endpoint: str) -> Any:
    """A plain boto3 client on the moto server, for tests to seed buckets."""
    return boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")


@pytest.fixture
def file_source(tmp_path: Path) -> FileSource:
    root = tmp_path / "registry"
    root.mkdir()
    return FileSource(root=root)


@pytest.fixture
def s3_source(s3_client: Any) -> S3Source:
    return S3Source(client=s3_client)


@pytest.fixture
def oci_registry(tmp_path: Path) -> Iterator[OciRegistryServer]:
    """A real OCI registry (docker-registry) on a free loopback port, without auth."""
    if REGISTRY_BINARY is None:
        pytest.skip(MISSING)
    with oci_registry_server(tmp_path / "oci-registry") as server:
        yield server


@pytest.fixture
def oci_source(oci_registry: OciRegistryServer) -> OciSource:
    return OciSource(host=oci_registry.host)


@pytest.fixture(params=["file", "s3", "oci"])
def source(request: pytest.FixtureRequest) -> SpecSource:
    """Each registry kind in turn: the same test runs against every adapter."""
    fixture = f"{request.param}_source"
    found: SpecSource = request.getfixturevalue(fixture)
    return found


@pytest.fixture
def puller_settings(nats_url: str, s3_endpoint: str) -> PullerSettings:
    """Settings as an operator would set them, with short retries to keep tests fast."""
    return PullerSettings(
        nats_url=nats_url,
        s3_endpoint_url=s3_endpoint,
        s3_max_attempts=2,
        connect_timeout_s=1.0,
        read_timeout_s=5.0,
        max_attempts=3,
        retry_backoff_s=(0.1,),
        concurrency=4,
    )


@pytest.fixture
async def puller(puller_settings: PullerSettings) -> AsyncIterator[PullerUnderTest]:
    """The puller running, with backend ``gpu-cluster-01`` (offering H100s) applied."""
    bus = await Bus.open(puller_settings.nats_url, service="test")
    service = PullerUnderTest(bus=bus, settings=puller_settings)
    await service.add_backend()
    service.start()
    try:
        yield service
    finally:
        await service.stop()
        await bus.close()
