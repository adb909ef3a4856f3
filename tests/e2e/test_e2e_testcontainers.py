"""One saga against the containers of compose.yaml: NATS JetStream and MinIO as the registry.

NATS and MinIO run as containers (``testcontainers``, the images ``compose.yaml`` names);
every plnt service runs as a local process pointed at the container's NATS, and the
workflow is pulled from an ``s3://`` registry on MinIO. Needs a Docker engine: without
one the module is skipped, saying so.
"""

import asyncio
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
import yaml
from stack_fixtures import FAST_ENV
from stack_support import Client, invoke, run_document, workflow_named
from testcontainers.core.container import DockerContainer
from testcontainers.core.docker_client import DockerClient
from testcontainers.core.waiting_utils import wait_for_logs

from plnt_cli.supervisor import StackConfig, Supervisor
from plnt_cli.up import wait_until_ready
from plnt_common.nats_server import free_ports

NATS_IMAGE = "nats:2.11-alpine"
MINIO_IMAGE = "minio/minio:RELEASE.2025-04-22T22-12-26Z"
MINIO_USER, MINIO_PASSWORD = "plnt", "plnt-minio-secret"
BUCKET = "microagents"
STARTUP_S = 60


def docker_engine_problem() -> str | None:
    """Why no Docker engine answers here, or None when one does (found the way
    testcontainers finds it: DOCKER_HOST, its settings, the default socket)."""
    try:
        DockerClient().client.ping()
    except Exception as exc:  # docker's DockerException, or the socket's own error
        return f"no Docker engine reachable: {exc}"
    return None


@dataclass(frozen=True)
class Containers:
    nats_url: str
    s3_endpoint: str


@pytest.fixture(scope="module")
def containers() -> Iterator[Containers]:
    problem = docker_engine_problem()
    if problem:
        pytest.skip(problem)
    nats = DockerContainer(NATS_IMAGE).with_command("--jetstream").with_exposed_ports(4222)
    minio = (
        DockerContainer(MINIO_IMAGE)
        .with_command("server /data")
        .with_env("MINIO_ROOT_USER", MINIO_USER)
        .with_env("MINIO_ROOT_PASSWORD", MINIO_PASSWORD)
        .with_exposed_ports(9000)
    )
    with nats, minio:
        wait_for_logs(nats, "Server is ready", timeout=STARTUP_S)
        wait_for_logs(minio, "API:", timeout=STARTUP_S)
        yield Containers(
            nats_url=f"nats://{nats.get_container_host_ip()}:{nats.get_exposed_port(4222)}",
            s3_endpoint=f"http://{minio.get_container_host_ip()}:{minio.get_exposed_port(9000)}",
        )


def publish_to_minio(endpoint: str, document: dict[str, object]) -> None:
    """Create the bucket and upload the workflow as the registry lays it out."""
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=MINIO_USER,
        aws_secret_access_key=MINIO_PASSWORD,
    )
    s3.create_bucket(Bucket=BUCKET)
    metadata = document["metadata"]
    assert isinstance(metadata, dict)
    key = f"{metadata['name']}/{metadata['version']}/workflow.yaml"
    s3.put_object(Bucket=BUCKET, Key=key, Body=yaml.safe_dump(document, sort_keys=False).encode())


@pytest.fixture(scope="module")
def stack(containers: Containers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    nats_port, router_port = free_ports(2)  # no local NATS starts on the first
    config = StackConfig(
        data_dir=tmp_path_factory.mktemp("containers"),
        nats_port=nats_port,
        router_port=router_port,
        external_nats_url=containers.nats_url,
        extra_env={
            **FAST_ENV,
            "PLNT_PULLER_S3_ENDPOINT_URL": containers.s3_endpoint,
            "PLNT_PULLER_S3_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": MINIO_USER,
            "AWS_SECRET_ACCESS_KEY": MINIO_PASSWORD,
        },
    )
    supervisor = Supervisor(config, say=lambda line: print(f"[plnt up] {line}"))
    supervisor.start()
    try:
        asyncio.run(wait_until_ready(config, timeout_s=STARTUP_S))
    except BaseException:
        supervisor.stop()
        raise
    yield supervisor
    supervisor.stop()


async def test_a_saga_on_container_nats_pulls_from_minio_and_gets_ready(
    containers: Containers, client: Client, tmp_path: Path
) -> None:
    publish_to_minio(containers.s3_endpoint, workflow_named("boxed"))
    document = run_document("boxed", registry=tmp_path)
    document["spec"]["workflow"]["registry"] = f"s3://{BUCKET}"
    await client.apply(document)

    body = await client.wait_phase("boxed", "Ready", timeout_s=120)
    assert body["status"]["revision"] == "1.0.0-g1"
    kinds = Counter(e.event_type for e in await client.events("boxed"))
    assert sum(n for kind, n in kinds.items() if kind.is_terminal) == 1, kinds
    code, revision, answer = await invoke(body["status"]["endpoint"], {"review": "fine"})
    assert (code, revision) == (200, "1.0.0-g1")
    assert answer["output"]
