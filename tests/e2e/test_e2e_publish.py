"""The push path on the real embedded stack: ``plnt publish`` (a real process) into a file
registry and into S3 (moto), then apply, then Ready; code with a requirement (installed
offline from a wheel built here) and a code tool; signed specs verified by the puller
against ``verify.publicKeys``, and every way a signature can be wrong ending ``Failed``
with its reason and nothing installed.
"""

import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from stack_fixtures import start_stack
from stack_support import Client, invoke, run_document, workflow_named
from test_e2e_code import READY_S, REQUIREMENT, ended, reasons, release_dir, terminal_of
from test_e2e_saga import EXAMPLE_BODY

from plnt_cli.supervisor import Supervisor
from plnt_common.events import EventType
from plnt_common.releases import release_name
from plnt_common.signatures import generate
from plnt_testkit.code_archives import build_wheel, code_archive, offline_pip_env
from plnt_testkit.moto_s3 import moto_s3_server

BUCKET = "specs"
AWS = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_DEFAULT_REGION": "us-east-1",
}

TOOL = '''\
"""A code tool: imports the workflow's requirement and leaves a mark beside the spec."""
import os
import pathlib

import plnt_testwheel


def tag(step):
    mark = pathlib.Path(os.environ["PLNT_RUNNER_WORKFLOW_FILE"]).with_name("tool-ran")
    mark.write_text(plnt_testwheel.VERSION)
    return {"tag": "{TAG}", "wheel": plnt_testwheel.VERSION}
'''


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with moto_s3_server() as endpoint:
        boto3.client("s3", endpoint_url=endpoint, **_boto_args()).create_bucket(Bucket=BUCKET)
        yield endpoint


def _boto_args() -> dict[str, str]:
    return {
        "aws_access_key_id": AWS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": AWS["AWS_SECRET_ACCESS_KEY"],
        "region_name": AWS["AWS_DEFAULT_REGION"],
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, s3_endpoint: str) -> Iterator[Supervisor]:
    wheels = tmp_path_factory.mktemp("wheels")
    build_wheel(wheels)
    env = {
        **offline_pip_env(wheels),
        **AWS,
        "PLNT_PULLER_S3_ENDPOINT_URL": s3_endpoint,
        "PLNT_INSTALLER_READY_TIMEOUT_S": str(READY_S),
    }
    supervisor = start_stack(tmp_path_factory.mktemp("publish"), env=env)
    yield supervisor
    supervisor.stop()


def plnt(*argv: str, s3_endpoint: str | None = None) -> subprocess.CompletedProcess[str]:
    """``plnt ARGV`` as a user runs it: its own process."""
    env = {**os.environ, **AWS}
    if s3_endpoint is not None:
        env["PLNT_PULLER_S3_ENDPOINT_URL"] = s3_endpoint
    return subprocess.run(
        [sys.executable, "-m", "plnt_cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def published(*argv: str, s3_endpoint: str | None = None) -> dict[str, str]:
    done = plnt("publish", *argv, s3_endpoint=s3_endpoint)
    assert done.returncode == 0, f"plnt publish failed: {done.stderr}"
    assert "Traceback" not in done.stderr
    return dict(line.split(": ", 1) for line in done.stdout.splitlines())


def spec_file(root: Path, name: str) -> Path:
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(workflow_named(name), sort_keys=False))
    return path


def code_folder(root: Path, name: str) -> Path:
    """A workflow whose first step is a code tool needing the wheel's module."""
    document = copy.deepcopy(workflow_named(name))
    document["spec"]["runtime"]["entrypoint"] = "python -m plnt_runner"
    document["spec"]["runtime"]["code"] = {"archive": "code.tar.gz", "requirements": [REQUIREMENT]}
    document["spec"]["tools"] = [{"name": "acme.tag", "call": "acme_tools:tag"}]
    document["spec"]["steps"].insert(0, {"id": "tag", "tool": "acme.tag"})
    folder = root / name
    (folder / "src").mkdir(parents=True)
    (folder / "workflow.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    (folder / "src" / "acme_tools.py").write_text(TOOL.replace("{TAG}", name))
    return folder


def with_verify(
    document: dict[str, Any], *keys: str, registry: str | None = None
) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    if keys:
        changed["spec"]["workflow"]["verify"] = {"publicKeys": list(keys)}
    if registry is not None:
        changed["spec"]["workflow"]["registry"] = registry
    return changed


async def assert_ready_and_serving(client: Client, name: str, integrity: str) -> dict[str, Any]:
    body = await ended(client, name, "Ready")
    assert body["status"]["specDigest"] == integrity
    code, revision, answer = await invoke(body["status"]["endpoint"], EXAMPLE_BODY)
    assert (code, revision) == (200, "1.0.0-g1"), answer
    return body


async def test_a_spec_alone_published_to_a_file_registry_deploys_ready(
    client: Client, registry: Path, tmp_path: Path
) -> None:
    name = "pub-file"
    pins = published(str(spec_file(tmp_path, name)), "--registry", registry.as_uri())
    assert pins["ref"] == f"{name}@1.0.0"
    document = run_document(name, registry=registry, integrity=pins["integrityHash"])
    await client.apply(document)
    await assert_ready_and_serving(client, name, pins["integrityHash"])


async def test_code_with_a_requirement_published_to_s3_deploys_ready_and_its_tool_runs(
    client: Client, registry: Path, tmp_path: Path, stack: Supervisor, s3_endpoint: str
) -> None:
    name = "pub-s3-code"
    folder = code_folder(tmp_path, name)
    pins = published(str(folder), "--registry", f"s3://{BUCKET}/team", s3_endpoint=s3_endpoint)
    document = run_document(name, registry=registry, integrity=pins["integrityHash"])
    await client.apply(with_verify(document, registry=f"s3://{BUCKET}/team"))
    await assert_ready_and_serving(client, name, pins["integrityHash"])
    assert (
        release_dir(stack, release_name("default", name, 1)) / "tool-ran"
    ).read_text() == "1.0.0"


async def test_a_signed_spec_with_code_on_a_file_registry_is_verified_and_ready(
    client: Client, registry: Path, tmp_path: Path, stack: Supervisor
) -> None:
    name = "pub-signed"
    key = generate()
    (tmp_path / "ci.key").write_text(key.file_text())
    pins = published(
        str(code_folder(tmp_path, name)),
        "--registry",
        registry.as_uri(),
        "--sign-key",
        str(tmp_path / "ci.key"),
    )
    other = generate().public().encoded()  # a rotation: the old key and the new one
    document = run_document(name, registry=registry, integrity=pins["integrityHash"])
    await client.apply(with_verify(document, other, key.public().encoded()))
    await assert_ready_and_serving(client, name, pins["integrityHash"])
    assert (
        release_dir(stack, release_name("default", name, 1)) / "tool-ran"
    ).read_text() == "1.0.0"


async def test_a_code_archive_swapped_after_signing_fails_code_invalid_and_installs_nothing(
    client: Client, registry: Path, tmp_path: Path
) -> None:
    name = "pub-swapped"
    key = generate()
    (tmp_path / "ci.key").write_text(key.file_text())
    folder = code_folder(tmp_path, name)
    published(str(folder), "--registry", registry.as_uri(), "--sign-key", str(tmp_path / "ci.key"))
    swapped = code_archive({"acme_tools.py": "def tag(step):\n    return {'evil': True}\n"})
    (registry / name / "1.0.0" / "code.tar.gz").write_bytes(swapped)
    await client.apply(with_verify(run_document(name, registry=registry), key.public().encoded()))
    body = await ended(client, name, "Failed")
    kind, data = await terminal_of(client, name, 1)
    assert (kind, data.reason.value) == (EventType.RUN_FAILED, "CodeInvalid"), data
    assert "does not match its digest" in data.message
    assert reasons(body) >= {"CodeInvalid"}
    assert await client.release_keys(name) == []


def _tamper_bytes(version: Path, trusted: str) -> None:
    spec = version / "workflow.yaml"
    spec.write_bytes(spec.read_bytes().replace(b"first-person plural", b"third person"))


def _sign_with_another_key(version: Path, trusted: str) -> None:
    from plnt_common.signatures import sign

    data = (version / "workflow.yaml").read_bytes()
    signature = sign(data, key=generate(), trusted_comment="timestamp:0\tfile:workflow.yaml")
    (version / "workflow.yaml.minisig").write_bytes(signature)


def _remove_signature(version: Path, trusted: str) -> None:
    (version / "workflow.yaml.minisig").unlink()


def _garbage_signature(version: Path, trusted: str) -> None:
    (version / "workflow.yaml.minisig").write_bytes(b"untrusted comment: x\n\x00\xff garbage\n")


@pytest.mark.parametrize(
    ("spoil", "reason", "says"),
    [
        pytest.param(_tamper_bytes, "SignatureInvalid", "altered", id="tampered-bytes"),
        pytest.param(
            _sign_with_another_key, "SignatureInvalid", "not one of the trusted", id="another-key"
        ),
        pytest.param(_remove_signature, "SignatureMissing", "has none", id="no-signature"),
        pytest.param(_garbage_signature, "SignatureInvalid", "signature", id="garbage-signature"),
    ],
)
async def test_a_signature_that_does_not_hold_fails_with_its_reason_and_installs_nothing(
    client: Client, registry: Path, tmp_path: Path, spoil: Any, reason: str, says: str
) -> None:
    name = f"pub-{reason.lower()}-{spoil.__name__.strip('_').replace('_', '-')}"[:40]
    key = generate()
    (tmp_path / "ci.key").write_text(key.file_text())
    published(
        str(spec_file(tmp_path, name)), "--registry", registry.as_uri(),
        "--sign-key", str(tmp_path / "ci.key"),
    )  # fmt: skip
    spoil(registry / name / "1.0.0", key.public().encoded())
    await client.apply(with_verify(run_document(name, registry=registry), key.public().encoded()))
    body = await ended(client, name, "Failed", timeout_s=30)
    kind, data = await terminal_of(client, name, 1)
    assert (kind, data.reason.value) == (EventType.RUN_FAILED, reason), data
    assert says in data.message
    assert reason in reasons(body)
    assert await client.release_keys(name) == []
