"""The push path through an ``oci://`` registry on the real embedded stack: ``plnt publish``
(its own process) signs a workflow with code and pushes it to a real OCI registry
(``docker-registry``) that wants basic auth; a WorkflowRun pinning the printed
``integrityHash`` and verifying the key is applied, and the puller, with the same docker
``config.json`` credentials, pulls the spec, code and signature layers: Ready, serving, and
the code tool ran. Without the credentials the run fails ``RegistryUnavailable`` naming the
401, and nothing is installed.
"""

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stack_fixtures import start_stack
from stack_support import Client, run_document
from test_e2e_code import READY_S, ended, reasons, release_dir, terminal_of
from test_e2e_publish import assert_ready_and_serving, code_folder, spec_file, with_verify

from plnt_cli.supervisor import Supervisor
from plnt_common.events import EventType
from plnt_common.releases import release_name
from plnt_common.signatures import generate
from plnt_testkit.code_archives import build_wheel, offline_pip_env
from plnt_testkit.oci_registry import (
    MISSING,
    REGISTRY_BINARY,
    OciRegistryServer,
    oci_registry_server,
)

USER, PASSWORD = "ci-publisher", "not-a-real-secret"


@pytest.fixture(scope="module")
def oci(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OciRegistryServer, Path]]:
    """A registry wanting basic auth, and a docker config directory holding its login."""
    if REGISTRY_BINARY is None:
        pytest.skip(MISSING)
    root = tmp_path_factory.mktemp("oci")
    with oci_registry_server(root / "registry", credentials=(USER, PASSWORD)) as server:
        config = root / "docker"
        config.mkdir()
        auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        (config / "config.json").write_text(json.dumps({"auths": {server.host: {"auth": auth}}}))
        yield server, config


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, oci: tuple[OciRegistryServer, Path]
) -> Iterator[Supervisor]:
    wheels = tmp_path_factory.mktemp("wheels")
    build_wheel(wheels)
    env = {
        **offline_pip_env(wheels),
        "DOCKER_CONFIG": str(oci[1]),
        "PLNT_INSTALLER_READY_TIMEOUT_S": str(READY_S),
        # A few quick redeliveries, so a run without credentials ends within the test.
        "PLNT_PULLER_MAX_ATTEMPTS": "3",
        "PLNT_PULLER_RETRY_BACKOFF_S": "[0.2]",
    }
    supervisor = start_stack(tmp_path_factory.mktemp("publish-oci"), env=env)
    yield supervisor
    supervisor.stop()


def published(*argv: str, docker_config: Path) -> dict[str, str]:
    """``plnt publish ARGV`` in its own process, with ``docker_config``'s credentials."""
    done = subprocess.run(
        [sys.executable, "-m", "plnt_cli", "publish", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_CONFIG": str(docker_config)},
        timeout=60,
    )
    assert done.returncode == 0, f"plnt publish failed: {done.stderr}"
    assert "Traceback" not in done.stderr
    return dict(line.split(": ", 1) for line in done.stdout.splitlines())


def on_oci(document: dict[str, Any], url: str) -> dict[str, Any]:
    return with_verify(document, registry=url)


async def test_signed_code_published_to_oci_deploys_ready_and_its_tool_runs(
    client: Client,
    registry: Path,
    tmp_path: Path,
    stack: Supervisor,
    oci: tuple[OciRegistryServer, Path],
) -> None:
    server, docker_config = oci
    name = "pub-oci"
    key = generate()
    (tmp_path / "ci.key").write_text(key.file_text())
    url = server.url("team/specs")
    pins = published(
        str(code_folder(tmp_path, name)),
        "--registry",
        url,
        "--sign-key",
        str(tmp_path / "ci.key"),
        docker_config=docker_config,
    )
    assert pins["registry"] == url
    document = run_document(name, registry=registry, integrity=pins["integrityHash"])
    await client.apply(on_oci(with_verify(document, key.public().encoded()), url))
    await assert_ready_and_serving(client, name, pins["integrityHash"])
    assert (
        release_dir(stack, release_name("default", name, 1)) / "tool-ran"
    ).read_text() == "1.0.0"


async def test_a_run_on_an_oci_registry_it_has_no_login_for_fails_registry_unavailable(
    client: Client,
    registry: Path,
    tmp_path: Path,
    oci: tuple[OciRegistryServer, Path],
) -> None:
    server, docker_config = oci
    name = "pub-oci-nologin"
    url = server.url("team/specs")
    published(str(spec_file(tmp_path, name)), "--registry", url, docker_config=docker_config)
    # The stack's docker config holds a login for 127.0.0.1:<port>; "localhost:<port>" is
    # the same registry under another name, which docker config keys do not match.
    other_name = url.replace("127.0.0.1", "localhost")
    await client.apply(on_oci(run_document(name, registry=registry), other_name))
    body = await ended(client, name, "Failed")
    kind, data = await terminal_of(client, name, 1)
    assert (kind, data.reason.value) == (EventType.RUN_FAILED, "RegistryUnavailable"), data
    assert "401 Unauthorized" in data.message and "no credentials for localhost" in data.message
    assert reasons(body) >= {"RegistryUnavailable"}
    assert await client.release_keys(name) == []
