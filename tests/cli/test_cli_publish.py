"""``plnt keygen`` and ``plnt publish`` in-process, against a file registry and moto's S3:
what lands in the registry, reproducible archives, refusals, and one-line errors."""

import copy
import gzip
import io
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from cli_support import plnt

from plnt_common.code_archive import archive_digest, check_archive
from plnt_common.signatures import parse_public_key, verify
from plnt_common.workflow import parse_workflow, spec_digest
from plnt_testkit.moto_s3 import moto_s3_server

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "registry" / "review-responder"


def example_document() -> dict[str, Any]:
    (spec,) = EXAMPLE.glob("*/workflow.yaml")
    document: dict[str, Any] = yaml.safe_load(spec.read_text())
    return document


def workflow_folder(root: Path, *, name: str = "pub", version: str = "1.0.0") -> Path:
    """A folder holding a workflow with code (``runtime.code``, no digest yet) and ``src/``."""
    document = copy.deepcopy(example_document())
    document["metadata"] = {"name": name, "version": version}
    document["spec"]["runtime"]["entrypoint"] = "python -m code_main"
    document["spec"]["runtime"]["code"] = {"archive": "code.tar.gz", "requirements": ["a==1"]}
    folder = root / name
    (folder / "src" / "pkg").mkdir(parents=True)
    (folder / "workflow.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    (folder / "src" / "code_main.py").write_text("print('hello')\n")
    (folder / "src" / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    return folder


def spec_alone(root: Path, *, name: str = "plain") -> Path:
    document = copy.deepcopy(example_document())
    document["metadata"] = {"name": name, "version": "1.0.0"}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def printed(out: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)


def test_keygen_writes_a_0600_secret_key_and_a_minisign_public_key(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    outcome = plnt(capfd, "keygen", "--out", str(tmp_path / "ci"))
    assert outcome.code == 0, outcome
    assert stat.S_IMODE((tmp_path / "ci.key").stat().st_mode) == 0o600
    public = parse_public_key((tmp_path / "ci.pub").read_text())
    assert public.encoded() in outcome.out
    again = plnt(capfd, "keygen", "--out", str(tmp_path / "ci"))
    assert "exists" in again.error_line


def test_a_spec_alone_is_published_byte_for_byte_and_prints_what_to_pin(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    spec = spec_alone(tmp_path)
    registry = tmp_path / "registry"
    outcome = plnt(capfd, "publish", str(spec), "--registry", registry.as_uri())
    assert outcome.code == 0, outcome
    stored = registry / "plain" / "1.0.0" / "workflow.yaml"
    assert stored.read_bytes() == spec.read_bytes()
    assert printed(outcome.out) == {
        "ref": "plain@1.0.0",
        "registry": registry.as_uri(),
        "integrityHash": spec_digest(spec.read_bytes()),
    }
    assert "uploaded workflow.yaml" in outcome.err


def test_code_is_packed_reproducibly_pinned_in_the_spec_and_signed(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    folder = workflow_folder(tmp_path)
    # what a developer's tools leave in src/: never packed
    for left in (".venv/bin/python3.py", ".mypy_cache/3.11/x.json", "pkg/__pycache__/m.pyc"):
        (folder / "src" / left).parent.mkdir(parents=True, exist_ok=True)
        (folder / "src" / left).write_text("machine-specific\n")
    plnt(capfd, "keygen", "--out", str(tmp_path / "k"))
    registry = tmp_path / "registry"
    argv = ["publish", str(folder), "--registry", registry.as_uri(), "--sign-key"]
    first = plnt(capfd, *argv, str(tmp_path / "k.key"))
    assert first.code == 0, first
    version = registry / "pub" / "1.0.0"
    spec, archive = (version / "workflow.yaml").read_bytes(), (version / "code.tar.gz").read_bytes()
    code = parse_workflow(spec).spec.runtime.code
    assert code is not None and code.digest == archive_digest(archive)
    check_archive(archive, digest=code.digest)
    with tarfile.open(fileobj=io.BytesIO(archive)) as members:
        listed = [(m.name, m.mtime, m.uid, m.gid, m.mode) for m in members]
    assert listed == [
        ("code_main.py", 0, 0, 0, 0o644),
        ("pkg/__init__.py", 0, 0, 0, 0o644),
    ]
    assert gzip.decompress(archive)  # a gzip without a name or time in its header
    assert archive[4:8] == b"\0\0\0\0"
    public = parse_public_key((tmp_path / "k.pub").read_text())
    verify(spec, signature_file=(version / "workflow.yaml.minisig").read_bytes(), keys=[public])
    assert printed(first.out)["integrityHash"] == spec_digest(spec)
    assert printed(first.out)["code digest"] == code.digest

    # Another folder with the same files (other mtimes, another order on disk): same bytes.
    os.utime(folder / "src" / "code_main.py", (1, 1))
    again = plnt(capfd, *argv, str(tmp_path / "k.key"))
    assert again.code == 0, again
    assert "nothing to upload" in again.err
    assert printed(again.out)["code digest"] == code.digest
    assert (version / "code.tar.gz").read_bytes() == archive


def test_a_changed_source_file_is_a_new_digest_refused_under_the_same_version_unless_forced(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    folder = workflow_folder(tmp_path)
    registry = tmp_path / "registry"
    first = plnt(capfd, "publish", str(folder), "--registry", registry.as_uri())
    assert first.code == 0, first
    archive = registry / "pub" / "1.0.0" / "code.tar.gz"
    published = archive.read_bytes()

    (folder / "src" / "code_main.py").write_text("print('changed')\n")
    refused = plnt(capfd, "publish", str(folder), "--registry", registry.as_uri())
    assert "already published" in refused.error_line and "--force" in refused.error_line
    assert archive.read_bytes() == published

    forced = plnt(capfd, "publish", str(folder), "--registry", registry.as_uri(), "--force")
    assert forced.code == 0, forced
    assert archive.read_bytes() != published
    new_digest = printed(forced.out)["code digest"]
    assert new_digest != printed(first.out)["code digest"]
    assert new_digest == archive_digest(archive.read_bytes())


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            lambda d: d["spec"]["steps"][0].update(deps=["nowhere"]), "nowhere", id="unknown-dep"
        ),
        pytest.param(lambda d: d["metadata"].update(version="one"), "version", id="bad-version"),
        pytest.param(
            lambda d: d["spec"]["steps"][0].setdefault("with", {}).update(promt="x"),
            "promt",
            id="unknown-with-key",
        ),
    ],
)
def test_an_invalid_spec_is_one_line_naming_the_problem_and_nothing_is_published(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], change: Any, expected: str
) -> None:
    document = example_document()
    change(document)
    spec = tmp_path / "workflow.yaml"
    spec.write_text(yaml.safe_dump(document))
    registry = tmp_path / "registry"
    line = plnt(capfd, "publish", str(spec), "--registry", registry.as_uri()).error_line
    assert expected in line and str(spec) in line
    assert not registry.exists()


def test_code_without_a_src_folder_is_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    folder = workflow_folder(tmp_path)
    for path in sorted((folder / "src").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    (folder / "src").rmdir()
    line = plnt(capfd, "publish", str(folder), "--registry", "file:///tmp/x").error_line
    assert "src" in line and "not a directory" in line


@pytest.mark.parametrize(
    "content",
    [
        pytest.param("garbage", id="garbage"),
        pytest.param("untrusted comment: minisign public key 1\nRWQ=\n", id="a-public-key"),
        pytest.param(None, id="missing"),
    ],
)
def test_a_bad_key_file_is_one_line_and_nothing_is_published(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], content: str | None
) -> None:
    key = tmp_path / "bad.key"
    if content is not None:
        key.write_text(content)
    registry = tmp_path / "registry"
    line = plnt(
        capfd, "publish", str(spec_alone(tmp_path)), "--registry", registry.as_uri(),
        "--sign-key", str(key),
    ).error_line  # fmt: skip
    assert str(key) in line
    assert not registry.exists()


# --- S3 -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with moto_s3_server() as endpoint:
        yield endpoint


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("PLNT_PULLER_S3_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="specs")
    yield client
    for item in client.list_objects_v2(Bucket="specs").get("Contents", []):
        client.delete_object(Bucket="specs", Key=item["Key"])
    client.delete_bucket(Bucket="specs")


def test_s3_publish_uploads_spec_archive_and_signature_under_the_prefix(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], s3: Any
) -> None:
    folder = workflow_folder(tmp_path)
    plnt(capfd, "keygen", "--out", str(tmp_path / "k"))
    argv = ["publish", str(folder), "--registry", "s3://specs/team", "--sign-key"]
    outcome = plnt(capfd, *argv, str(tmp_path / "k.key"))
    assert outcome.code == 0, outcome
    keys = sorted(item["Key"] for item in s3.list_objects_v2(Bucket="specs")["Contents"])
    assert keys == [
        "team/pub/1.0.0/code.tar.gz",
        "team/pub/1.0.0/workflow.yaml",
        "team/pub/1.0.0/workflow.yaml.minisig",
    ]
    spec = s3.get_object(Bucket="specs", Key="team/pub/1.0.0/workflow.yaml")["Body"].read()
    assert printed(outcome.out)["integrityHash"] == spec_digest(spec)
    assert "nothing to upload" in plnt(capfd, *argv, str(tmp_path / "k.key")).err

    (folder / "src" / "code_main.py").write_text("print('changed')\n")
    assert "--force" in plnt(capfd, *argv, str(tmp_path / "k.key")).error_line


def test_an_unreachable_s3_registry_is_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from plnt_common.nats_server import free_port

    monkeypatch.setenv("PLNT_PULLER_S3_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    line = plnt(capfd, "publish", str(spec_alone(tmp_path)), "--registry", "s3://specs").error_line
    assert "cannot be reached" in line and "127.0.0.1" in line


def test_missing_s3_credentials_are_one_line(
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    s3_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PLNT_PULLER_S3_ENDPOINT_URL", s3_endpoint)
    for variable in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
    ):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    line = plnt(capfd, "publish", str(spec_alone(tmp_path)), "--registry", "s3://specs").error_line
    assert "credentials" in line


def test_a_missing_bucket_is_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], s3: Any
) -> None:
    line = plnt(
        capfd, "publish", str(spec_alone(tmp_path)), "--registry", "s3://no-such-bucket"
    ).error_line
    assert "no-such-bucket" in line and "does not exist" in line
