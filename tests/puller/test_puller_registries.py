"""Registry adapters against real registries: a directory tree and moto's S3 server.

``TestRegistryContract`` runs once per adapter (the ``source`` fixture is parametrized),
so both keep the same promises; scheme-specific behaviour has its own tests below.
"""

import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from puller_support import VERSION, WORKFLOW, FileSource, S3Source, SpecSource, workflow_yaml

from plnt_common.errors import RegistryUnavailable, SpecInvalid, SpecNotFound
from plnt_common.nats_server import free_port
from plnt_common.oci import OciClient
from plnt_common.workflow import MAX_SPEC_BYTES
from plnt_puller.adapters.file_registry import FileRegistry
from plnt_puller.adapters.oci_registry import OciRegistry
from plnt_puller.adapters.registries import RegistryByScheme
from plnt_puller.adapters.s3_registry import S3Registry
from plnt_puller.ports import Registry


def adapter_for(source: SpecSource, s3_endpoint: str | None) -> Registry:
    if source.kind == "file":
        return FileRegistry()
    if source.kind == "oci":
        return OciRegistry(client=OciClient(attempts=2, connect_timeout_s=1.0))
    return S3Registry(endpoint_url=s3_endpoint, max_attempts=2, connect_timeout_s=1.0)


class TestRegistryContract:
    @pytest.fixture
    def registry(self, source: SpecSource, request: pytest.FixtureRequest) -> Registry:
        endpoint = request.getfixturevalue("s3_endpoint") if source.kind == "s3" else None
        return adapter_for(source, endpoint)

    async def test_fetch_returns_the_published_bytes_unchanged(
        self, source: SpecSource, registry: Registry
    ) -> None:
        data = workflow_yaml() + b"# trailing comment keeps its bytes\n"
        source.publish(data)
        fetched = await registry.fetch(registry=source.url, name=WORKFLOW, version=VERSION)
        assert fetched == data

    async def test_fetch_reads_the_version_asked_for(
        self, source: SpecSource, registry: Registry
    ) -> None:
        source.publish(b"one", version="1.0.0")
        source.publish(b"two", version="2.0.0")
        assert await registry.fetch(registry=source.url, name=WORKFLOW, version="2.0.0") == b"two"

    async def test_a_missing_spec_is_spec_not_found_naming_where_it_looked(
        self, source: SpecSource, registry: Registry
    ) -> None:
        source.publish(workflow_yaml(), version="1.0.0")
        with pytest.raises(SpecNotFound) as caught:
            await registry.fetch(registry=source.url, name=WORKFLOW, version="9.9.9")
        assert source.location(version="9.9.9") in str(caught.value)
        assert not caught.value.retryable

    async def test_a_spec_over_the_size_bound_is_refused_naming_its_size(
        self, source: SpecSource, registry: Registry
    ) -> None:
        size = MAX_SPEC_BYTES + 10
        source.publish(b"#" * size)
        with pytest.raises(SpecInvalid) as caught:
            await registry.fetch(registry=source.url, name=WORKFLOW, version=VERSION)
        assert f"{size} bytes" in str(caught.value)
        assert f"{MAX_SPEC_BYTES}-byte bound" in str(caught.value)

    async def test_a_spec_exactly_at_the_size_bound_is_fetched(
        self, source: SpecSource, registry: Registry
    ) -> None:
        source.publish(b"#" * MAX_SPEC_BYTES)
        fetched = await registry.fetch(registry=source.url, name=WORKFLOW, version=VERSION)
        assert len(fetched) == MAX_SPEC_BYTES


# --- file:// -------------------------------------------------------------------------


async def test_file_registry_refuses_a_symlink_leading_out_of_the_root(
    file_source: FileSource, tmp_path: Path
) -> None:
    outside = tmp_path / "outside" / VERSION
    outside.mkdir(parents=True)
    (outside / "workflow.yaml").write_bytes(workflow_yaml())
    (file_source.root / WORKFLOW).symlink_to(outside.parent, target_is_directory=True)
    with pytest.raises(SpecNotFound, match="resolves outside the registry directory"):
        await FileRegistry().fetch(registry=file_source.url, name=WORKFLOW, version=VERSION)


async def test_file_registry_refuses_a_spec_file_that_is_a_symlink_out_of_the_root(
    file_source: FileSource, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_bytes(workflow_yaml())
    version_dir = file_source.root / WORKFLOW / VERSION
    version_dir.mkdir(parents=True)
    (version_dir / "workflow.yaml").symlink_to(secret)
    with pytest.raises(SpecNotFound, match="outside"):
        await FileRegistry().fetch(registry=file_source.url, name=WORKFLOW, version=VERSION)


async def test_file_registry_follows_symlinks_that_stay_inside_the_root(
    file_source: FileSource,
) -> None:
    file_source.publish(b"released", version="1.0.0")
    (file_source.root / WORKFLOW / VERSION).symlink_to(
        file_source.root / WORKFLOW / "1.0.0", target_is_directory=True
    )
    fetched = await FileRegistry().fetch(registry=file_source.url, name=WORKFLOW, version=VERSION)
    assert fetched == b"released"


async def test_file_registry_whose_root_is_itself_a_symlink_still_serves(
    file_source: FileSource, tmp_path: Path
) -> None:
    file_source.publish(b"via a linked root")
    linked = tmp_path / "linked-registry"
    linked.symlink_to(file_source.root, target_is_directory=True)
    fetched = await FileRegistry().fetch(registry=linked.as_uri(), name=WORKFLOW, version=VERSION)
    assert fetched == b"via a linked root"


async def test_file_registry_with_a_missing_root_is_spec_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(SpecNotFound, match=f"registry directory {missing} does not exist"):
        await FileRegistry().fetch(registry=missing.as_uri(), name=WORKFLOW, version=VERSION)


async def test_file_registry_refuses_a_directory_where_the_spec_should_be(
    file_source: FileSource,
) -> None:
    (file_source.root / WORKFLOW / VERSION / "workflow.yaml").mkdir(parents=True)
    with pytest.raises(SpecNotFound, match="not a regular file"):
        await FileRegistry().fetch(registry=file_source.url, name=WORKFLOW, version=VERSION)


NOBODY = 65534


def fetch_as_unprivileged_user(registry: str) -> str:
    """Fetch in a forked child that runs as ``nobody`` when we are root (root reads every
    file whatever its mode); the outcome comes back as one line through a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        outcome = "fetched"
        try:
            os.close(read_end)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            fetch = FileRegistry().fetch(registry=registry, name=WORKFLOW, version=VERSION)
            asyncio.run(fetch)
        except SpecNotFound as exc:
            outcome = f"SpecNotFound: {exc}"
        except BaseException as exc:
            outcome = f"unexpected: {exc!r}"
        finally:
            os.write(write_end, outcome.encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        outcome = pipe.read().decode()
    os.waitpid(pid, 0)
    return outcome


def test_file_registry_reports_an_unreadable_spec_as_not_found() -> None:
    # a registry every user may traverse (pytest's own temporary folders are the owner's
    # only), holding a spec no one but root may read
    root = Path(tempfile.mkdtemp(prefix="plnt-unreadable-"))
    try:
        root.chmod(0o755)
        source = FileSource(root=root)
        source.publish(workflow_yaml())
        for directory in (root / WORKFLOW, root / WORKFLOW / VERSION):
            directory.chmod(0o755)
        spec = root / WORKFLOW / VERSION / "workflow.yaml"
        spec.chmod(0)
        assert fetch_as_unprivileged_user(source.url) == (
            f"SpecNotFound: {spec} is not readable by the puller"
        )
    finally:
        shutil.rmtree(root)


# --- s3:// ---------------------------------------------------------------------------


async def test_s3_registry_with_a_missing_bucket_is_spec_not_found(s3_endpoint: str) -> None:
    registry = S3Registry(endpoint_url=s3_endpoint)
    with pytest.raises(SpecNotFound) as caught:
        await registry.fetch(registry="s3://no-such-bucket", name=WORKFLOW, version=VERSION)
    assert f"s3://no-such-bucket/{WORKFLOW}/{VERSION}/workflow.yaml" in str(caught.value)
    assert "bucket missing" in str(caught.value)


async def test_s3_registry_without_a_prefix_reads_from_the_bucket_root(
    s3_client: Any, s3_endpoint: str
) -> None:
    source = S3Source(client=s3_client, bucket="flat-bucket", prefix="")
    s3_client.put_object(
        Bucket="flat-bucket", Key=f"{WORKFLOW}/{VERSION}/workflow.yaml", Body=b"flat"
    )
    registry = S3Registry(endpoint_url=s3_endpoint)
    fetched = await registry.fetch(registry="s3://flat-bucket", name=WORKFLOW, version=VERSION)
    assert (fetched, source.bucket) == (b"flat", "flat-bucket")


async def test_s3_registry_gives_up_on_a_dead_endpoint_after_bounded_retries(
    aws_env: None,
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: connections are refused
    registry = S3Registry(endpoint_url=dead, max_attempts=2, connect_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(RegistryUnavailable) as caught:
        await registry.fetch(registry="s3://microagents", name=WORKFLOW, version=VERSION)
    # Two attempts with one jittered back-off of at most a second between them.
    assert time.monotonic() - started < 5
    assert caught.value.retryable
    assert dead in str(caught.value)


# --- scheme dispatch -------------------------------------------------------------------


async def test_a_scheme_without_an_adapter_is_refused_naming_the_supported_ones() -> None:
    registry = RegistryByScheme(adapters={"file": FileRegistry()})
    with pytest.raises(SpecNotFound) as caught:
        await registry.fetch(registry="oci://ghcr.io/microagents", name=WORKFLOW, version=VERSION)
    assert str(caught.value) == "oci:// registries are not supported yet; use file://"


async def test_registry_by_scheme_names_every_supported_scheme(file_source: FileSource) -> None:
    registry = RegistryByScheme(adapters={"file": FileRegistry(), "s3": FileRegistry()})
    with pytest.raises(SpecNotFound) as caught:
        await registry.fetch(registry="oci://ghcr.io/x", name=WORKFLOW, version=VERSION)
    assert str(caught.value) == "oci:// registries are not supported yet; use s3:// or file://"
    file_source.publish(b"dispatched")
    fetched = await registry.fetch(registry=file_source.url, name=WORKFLOW, version=VERSION)
    assert fetched == b"dispatched"
