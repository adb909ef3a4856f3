"""``plnt publish`` to ``oci://`` registries, in-process, against a real OCI registry
(Debian's ``docker-registry``): the artifact's manifest read back over plain HTTP (not
through plnt's client), each file a layer of its media type, the spec's layer digest the
``integrityHash`` printed, refusals and ``--force`` as on the other registries, docker
config credentials, and what the puller's adapter reads back."""

import base64
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import plnt
from test_cli_publish import printed, spec_alone, workflow_folder

from plnt_common.code_archive import archive_digest
from plnt_common.nats_server import free_port
from plnt_common.oci import OciClient
from plnt_common.signatures import parse_public_key, verify
from plnt_common.workflow import parse_workflow, spec_digest
from plnt_puller.adapters.oci_registry import OciRegistry
from plnt_testkit.oci_registry import (
    MISSING,
    REGISTRY_BINARY,
    OciRegistryServer,
    oci_registry_server,
)

USER, PASSWORD = "publisher", "s3cret-pass"


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[OciRegistryServer]:
    if REGISTRY_BINARY is None:
        pytest.skip(MISSING)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    with oci_registry_server(tmp_path / "oci") as server:
        yield server


@pytest.fixture
def auth_registry(tmp_path: Path) -> Iterator[OciRegistryServer]:
    if REGISTRY_BINARY is None:
        pytest.skip(MISSING)
    with oci_registry_server(tmp_path / "oci-auth", credentials=(USER, PASSWORD)) as server:
        yield server


def get(server: OciRegistryServer, path: str, accept: str = "") -> bytes:
    """A plain HTTP GET on the registry, with its credentials when it has them."""
    request = urllib.request.Request(f"http://{server.host}{path}")
    if accept:
        request.add_header("Accept", accept)
    if server.credentials is not None:
        token = base64.b64encode(":".join(server.credentials).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        data: bytes = response.read()
        return data


def manifest_of(server: OciRegistryServer, repository: str, tag: str) -> dict[str, Any]:
    accept = "application/vnd.oci.image.manifest.v1+json"
    found: dict[str, Any] = json.loads(get(server, f"/v2/{repository}/manifests/{tag}", accept))
    return found


def test_publish_pushes_spec_code_and_signature_as_layers_of_one_artifact(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], registry: OciRegistryServer
) -> None:
    folder = workflow_folder(tmp_path)
    plnt(capfd, "keygen", "--out", str(tmp_path / "k"))
    url = registry.url("team/specs")
    argv = ["publish", str(folder), "--registry", url, "--sign-key", str(tmp_path / "k.key")]
    outcome = plnt(capfd, *argv)
    assert outcome.code == 0, outcome

    manifest = manifest_of(registry, "team/specs/pub", "1.0.0")
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
    assert manifest["artifactType"] == "application/vnd.microagents.workflow.v1+yaml"
    layers = {
        layer["annotations"]["org.opencontainers.image.title"]: layer
        for layer in manifest["layers"]
    }
    assert {name: layer["mediaType"] for name, layer in layers.items()} == {
        "workflow.yaml": "application/vnd.microagents.workflow.v1+yaml",
        "code.tar.gz": "application/vnd.microagents.code.v1.tar+gzip",
        "workflow.yaml.minisig": "application/vnd.microagents.signature.v1+minisign",
    }
    blobs = {
        name: get(registry, f"/v2/team/specs/pub/blobs/{layer['digest']}")
        for name, layer in layers.items()
    }
    spec = blobs["workflow.yaml"]
    assert layers["workflow.yaml"]["digest"] == spec_digest(spec)
    assert printed(outcome.out)["integrityHash"] == layers["workflow.yaml"]["digest"]
    code = parse_workflow(spec).spec.runtime.code
    assert code is not None and code.digest == archive_digest(blobs["code.tar.gz"])
    public = parse_public_key((tmp_path / "k.pub").read_text())
    verify(spec, signature_file=blobs["workflow.yaml.minisig"], keys=[public])

    assert "nothing to upload" in plnt(capfd, *argv).err
    (folder / "src" / "code_main.py").write_text("print('changed')\n")
    assert "--force" in plnt(capfd, *argv).error_line
    forced = plnt(capfd, *argv, "--force")
    assert forced.code == 0, forced
    replaced = manifest_of(registry, "team/specs/pub", "1.0.0")
    assert len(replaced["layers"]) == 3
    assert printed(forced.out)["integrityHash"] != printed(outcome.out)["integrityHash"]


async def test_what_publish_pushed_is_what_the_puller_reads(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], registry: OciRegistryServer
) -> None:
    folder = workflow_folder(tmp_path, name="roundtrip")
    plnt(capfd, "keygen", "--out", str(tmp_path / "k"))
    url = registry.url()
    argv = ["publish", str(folder), "--registry", url, "--sign-key", str(tmp_path / "k.key")]
    outcome = plnt(capfd, *argv)
    assert outcome.code == 0, outcome
    puller = OciRegistry(client=OciClient())

    spec = await puller.fetch(registry=url, name="roundtrip", version="1.0.0")
    assert spec_digest(spec) == printed(outcome.out)["integrityHash"]
    code = parse_workflow(spec).spec.runtime.code
    assert code is not None
    archive = await puller.fetch(
        registry=url, name="roundtrip", version="1.0.0", file=code.archive, max_bytes=1 << 20
    )
    assert archive_digest(archive) == code.digest
    signature = await puller.fetch_signature(registry=url, name="roundtrip", version="1.0.0")
    assert signature is not None
    verify(
        spec, signature_file=signature, keys=[parse_public_key((tmp_path / "k.pub").read_text())]
    )


def test_credentials_come_from_the_docker_config(
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    auth_registry: OciRegistryServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = spec_alone(tmp_path)
    argv = ["publish", str(spec), "--registry", auth_registry.url()]
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "empty"))
    line = plnt(capfd, *argv).error_line
    assert "401" in line and f"no credentials for {auth_registry.host}" in line

    config = tmp_path / "docker"
    config.mkdir()
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (config / "config.json").write_text(json.dumps({"auths": {auth_registry.host: {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    outcome = plnt(capfd, *argv)
    assert outcome.code == 0, outcome
    manifest = manifest_of(auth_registry, "microagents/plain", "1.0.0")
    assert manifest["layers"][0]["digest"] == spec_digest(spec.read_bytes())


def test_an_unreachable_oci_registry_is_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    dead = f"127.0.0.1:{free_port()}"
    line = plnt(
        capfd, "publish", str(spec_alone(tmp_path)), "--registry", f"oci://{dead}/specs"
    ).error_line
    assert f"registry {dead} did not answer" in line
