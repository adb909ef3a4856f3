"""Every error a user can cause is one line naming the problem, before anything acts."""

from pathlib import Path
from typing import Any

import pytest
from cli_support import plnt, run_manifest, write_yaml

WILDCARD = "wildcards (* and >) are not accepted"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["up", "--router-port", "99999"], "port 99999 is not between 1 and 65535"),
        (["up", "--nats-port", "0"], "port 0 is not between 1 and 65535"),
        (["up", "--replicas", "0"], "0 replicas: use 1 to 16"),
        (["demo", "--router-port", "http"], "'http' is not a port number"),
        (["wait", "wr", "x", "--for", "phase=Bogus"], "unknown phase; the phases are Pending, "),
        (["wait", "wr", "x", "--for", "ready"], "use phase=<Phase> or delete"),
        (["wait", "wr", "x", "--for", "phase=Ready", "--timeout", "nan"], "--timeout 'nan'"),
        (["delete", "wr", "x", "--timeout=-5s"], "--timeout '-5s'"),
        (["delete", "wr", "x", "--timeout", "inf"], "--timeout 'inf'"),
        (["wait", "backends", "x", "--for", "delete"], "wait works on workflowruns"),
        (["get", "gadgets"], "unknown resource type 'gadgets'"),
        (["get", "wr", "*"], WILDCARD),
        (["get", "wr", ">"], WILDCARD),
        (["get", "backends", "gpu-*"], WILDCARD),
        (["history", "*"], WILDCARD),
        (["history", ">"], WILDCARD),
        (["wait", "wr", "*", "--for", "phase=Ready"], WILDCARD),
        (["delete", "wr", ">"], WILDCARD),
        (["invoke", "*"], WILDCARD),
        (["get", "wr", "-n", "*"], "namespace '*' is not a DNS-1123 label: wildcards"),
        (["apply", "-f", "x.yaml", "-n", "a b"], "namespace 'a b' is not a DNS-1123 label"),
        (["get", "wr", "a b"], "WorkflowRun name 'a b' is not a DNS-1123 label"),
        (["get", "wr", "x" * 41], "longer than 40 characters"),
        (["get", "backends", "y" * 64], "longer than 63 characters"),
        (["invoke", "x", "--data", "{"], "--data is not valid JSON"),
        (["invoke", "x", "--data", "@/no/such/body.json"], "no such file"),
        (["invoke", "x", "--data", "@/"], "--data @/: a directory"),
        (["invoke", "x", "--data", "@" + "a" * 300], ": File name too long"),
        (["apply", "-f", "a" * 300], ": File name too long"),
        (["--nats", "nats://[", "get", "wr"], "is not a NATS URL"),
        (["--nats", "nats://127.0.0.1:99999", "get", "wr"], "is not a NATS URL"),
        (["wait", "wr", "x"], "the following arguments are required: --for"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_a_bad_argument_is_one_line_naming_it(
    capfd: pytest.CaptureFixture[str], bus_url: str, argv: list[str], expected: str
) -> None:
    prefix = [] if argv[0] == "--nats" else ["--nats", bus_url]
    assert expected in plnt(capfd, *prefix, *argv).error_line


def test_up_refuses_a_data_dir_that_is_or_is_below_a_file(
    capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    file = tmp_path / "data"
    file.write_text("")
    line = plnt(capfd, "up", "--data-dir", str(file)).error_line
    assert line == f"plnt: --data-dir {file}: not a directory"
    line = plnt(capfd, "demo", "--data-dir", str(file / "below")).error_line
    assert line == f"plnt: --data-dir {file / 'below'}: cannot create it: Not a directory"


def test_a_wildcard_name_reads_no_other_run(
    capfd: pytest.CaptureFixture[str], bus_url: str, tmp_path: Path
) -> None:
    manifest = write_yaml(tmp_path / "runs.yaml", run_manifest("alpha"), run_manifest("beta"))
    assert plnt(capfd, "--nats", bus_url, "apply", "-f", str(manifest)).code == 0
    for argv in (["get", "wr", "*"], ["get", "wr", "*", "-o", "json"], ["history", ">"]):
        outcome = plnt(capfd, "--nats", bus_url, *argv)
        assert WILDCARD in outcome.error_line
        assert "alpha" not in outcome.out + outcome.err


def test_a_bad_timeout_is_refused_before_the_delete(
    capfd: pytest.CaptureFixture[str], bus_url: str, tmp_path: Path
) -> None:
    manifest = write_yaml(tmp_path / "run.yaml", run_manifest("keep-me"))
    assert plnt(capfd, "--nats", bus_url, "apply", "-f", str(manifest)).code == 0
    line = plnt(capfd, "--nats", bus_url, "delete", "wr", "keep-me", "--timeout", "nan").error_line
    assert "--timeout 'nan'" in line
    assert plnt(capfd, "--nats", bus_url, "get", "wr", "keep-me").code == 0


BINARY = b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary"


@pytest.mark.parametrize(
    ("write", "expected"),
    [
        (lambda path: path.write_bytes(BINARY), "not a text file (not UTF-8)"),
        (
            lambda path: path.write_text(
                "apiVersion: plnt.work/v1\nkind: WorkflowRun\nmetadata: rr\n"
            ),
            "WorkflowRun: metadata must be a mapping with a name, not 'rr'",
        ),
        (lambda path: path.mkdir(), "a directory without *.yaml or *.yml files"),
        (lambda path: None, "no such file"),
        (lambda path: path.write_text("# nothing\n"), "no resources in the file"),
        (lambda path: path.write_text("- just\n- a list\n"), "a resource must be a mapping"),
        (
            lambda path: path.write_text('"'),
            "not valid YAML at line 1: did not expect end of stream",
        ),
    ],
    ids=["binary", "metadata-string", "empty-directory", "missing", "empty", "list", "unclosed"],
)
def test_a_bad_manifest_is_one_line_naming_it(
    capfd: pytest.CaptureFixture[str], bus_url: str, tmp_path: Path, write: Any, expected: str
) -> None:
    target = tmp_path / "manifest.yaml"
    write(target)
    assert expected in plnt(capfd, "--nats", bus_url, "apply", "-f", str(target)).error_line


def test_a_run_over_the_bus_message_limit_is_refused_at_once_with_the_limit_named(
    capfd: pytest.CaptureFixture[str], bus_url: str, tmp_path: Path
) -> None:
    payload = {"review": "x" * 1_100_000}
    manifest = write_yaml(
        tmp_path / "big.yaml", run_manifest("big", smokeTest={"payload": payload})
    )
    # the check's own message: refused before any publish (the bus's retries take 9.5 s)
    line = plnt(capfd, "--nats", bus_url, "apply", "-f", str(manifest)).error_line
    assert "WorkflowRun 'big' is 1,100," in line
    assert "must stay under 983,040 (the bus's message limit of 1,048,576 bytes" in line
    assert "not found" in plnt(capfd, "--nats", bus_url, "get", "wr", "big").error_line


def test_a_binary_data_file_is_one_line_naming_it(
    capfd: pytest.CaptureFixture[str], bus_url: str, tmp_path: Path
) -> None:
    body = tmp_path / "body.bin"
    body.write_bytes(BINARY)
    line = plnt(capfd, "--nats", bus_url, "invoke", "x", "--data", f"@{body}").error_line
    assert line == f"plnt: --data @{body}: not a text file (not UTF-8)"


def test_a_bad_manifest_is_named_before_the_bus_is_tried(
    capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text("kind: [unclosed")
    line = plnt(capfd, "--nats", "nats://127.0.0.1:1", "apply", "-f", str(manifest)).error_line
    assert "not valid YAML" in line
