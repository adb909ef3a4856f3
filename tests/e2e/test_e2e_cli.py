"""The plnt CLI as a user runs it: real subprocesses against the real stack."""

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from stack_support import EXAMPLES, Client, publish_spec, run_document, workflow_named

from plnt_cli.supervisor import Supervisor


def plnt(
    *args: str, nats: str | None = None, stdin: str | None = None, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PLNT_NATS_URL"}
    env["PLNT_HOME"] = env.get("PLNT_TEST_HOME", "/nonexistent-plnt-home")
    prefix = ["--nats", nats] if nats else []
    return subprocess.run(
        [sys.executable, "-m", "plnt_cli", *prefix, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def nats(stack: Supervisor) -> str:
    return stack.config.nats_url


def test_apply_get_history_and_invoke_through_the_cli(
    nats: str, registry: Path, tmp_path: Path
) -> None:
    publish_spec(registry, workflow_named("cli-run"))
    backend = plnt("apply", "-f", str(EXAMPLES / "backend-local.yaml"), nats=nats)
    assert backend.returncode == 0, backend.stderr
    manifest = tmp_path / "run.yaml"
    manifest.write_text(yaml.safe_dump(run_document("cli-run", registry=registry)))
    applied = plnt("apply", "-f", str(manifest), nats=nats)
    assert applied.stdout.strip() == "workflowrun.plnt.work/cli-run created"

    waited = plnt(
        "wait", "workflowrun", "cli-run", "--for", "phase=Ready", "--timeout", "60s", nats=nats
    )
    assert waited.returncode == 0, waited.stderr
    assert "condition met" in waited.stdout

    table = plnt("get", "wr", nats=nats)
    row = next(line for line in table.stdout.splitlines() if line.startswith("cli-run "))
    assert "Ready" in row and "1.0.0-g1" in row

    document = json.loads(plnt("get", "workflowrun", "cli-run", "-o", "json", nats=nats).stdout)
    assert document["apiVersion"] == "plnt.work/v1" and document["kind"] == "WorkflowRun"
    meta = document["metadata"]
    assert {"name", "namespace", "uid", "generation", "resourceVersion", "finalizers"} <= set(meta)
    assert meta["finalizers"] == ["plnt.work/saga"]
    assert document["status"]["phase"] == "Ready"
    assert yaml.safe_load(
        plnt("get", "workflowrun", "cli-run", "-o", "yaml", nats=nats).stdout
    ) == document | {"metadata": document["metadata"]}

    history = plnt("history", "cli-run", nats=nats).stdout
    for kind in ("run.requested", "spec.pulled", "canary.installed", "smoke.passed", "run.ready"):
        assert kind in history

    invoked = plnt("invoke", "cli-run", "--data", json.dumps({"review": "Lovely staff"}), nats=nats)
    assert invoked.returncode == 0, invoked.stderr
    assert json.loads(invoked.stdout)["output"]["reply"]
    assert "revision 1.0.0-g1" in invoked.stderr


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("kind: [unclosed", "not valid YAML"),
        ("apiVersion: plnt.work/v1\nkind: Gadget\nmetadata: {name: x}\n", "unknown kind 'Gadget'"),
        (
            "apiVersion: plnt.work/v1\nkind: WorkflowRun\nmetadata: {name: Bad_Name}\n"
            "spec: {workflow: {ref: a@1.0.0, registry: 's3://bucket'}, backend: {cluster: c}}\n",
            "not a DNS-1123 label",
        ),
        (
            "apiVersion: plnt.work/v1\nkind: WorkflowRun\nmetadata: {name: ok}\n"
            "spec: {workflow: {ref: a@1.0.0, registry: 's3://bucket'}, backend: {cluster: c}, "
            "replicas: {min: 5, max: 2}}\n",
            "replicas.min (5) exceeds replicas.max (2)",
        ),
    ],
    ids=["bad-yaml", "unknown-kind", "bad-name", "min-over-max"],
)
def test_bad_input_gets_one_clear_line_and_a_non_zero_exit(
    nats: str, tmp_path: Path, content: str, expected: str
) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(content)
    assert expected in one_line_error(plnt("apply", "-f", str(manifest), nats=nats))


def test_an_unknown_name_exits_non_zero(nats: str) -> None:
    assert "not found" in one_line_error(plnt("get", "workflowrun", "no-such-run", nats=nats))


def test_an_unreachable_bus_is_named() -> None:
    line = one_line_error(plnt("get", "wr", nats="nats://127.0.0.1:1"))
    assert "cannot reach NATS at nats://127.0.0.1:1" in line


def test_wait_fails_fast_when_the_run_ends_in_another_phase(
    nats: str, registry: Path, tmp_path: Path, client: Client
) -> None:
    manifest = tmp_path / "run.yaml"
    manifest.write_text(yaml.safe_dump(run_document("cli-missing", registry=registry)))
    assert plnt("apply", "-f", str(manifest), nats=nats).returncode == 0
    result = plnt(
        "wait", "wr", "cli-missing", "--for", "phase=Ready", "--timeout", "60s", nats=nats
    )
    assert result.returncode == 1
    assert "ended Failed" in result.stderr


@pytest.fixture
def busy_default_ports() -> Iterator[None]:
    """Hold 4222 and 8080 (when free) so the demo must pick other ports."""
    held = []
    for port in (4222, 8080):
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
            held.append(sock)
        except OSError:
            sock.close()  # already taken by something else: just as good
    yield
    for sock in held:
        sock.close()


def test_demo_runs_end_to_end_on_other_ports_when_the_defaults_are_taken(
    busy_default_ports: None, tmp_path: Path
) -> None:
    env_home = {"PLNT_TEST_HOME": str(tmp_path)}
    os.environ.update(env_home)
    try:
        first = plnt("demo", timeout=240)
        second = plnt("demo", timeout=240)
    finally:
        os.environ.pop("PLNT_TEST_HOME")
    for result in (first, second):
        assert result.returncode == 0, result.stdout + result.stderr
        assert "port 4222 is taken" in result.stdout and "port 8080 is taken" in result.stdout
        assert "run.ready" in result.stdout
        assert "Drafted reply:" in result.stdout
        assert "Traceback" not in result.stdout + result.stderr


def test_up_refuses_a_sync_interval_nats_server_would_not_take(tmp_path: Path) -> None:
    result = plnt("up", "--data-dir", str(tmp_path), "--nats-sync-interval", "fast")
    assert one_line_error(result) == (
        "plnt: --nats-sync-interval: sync interval 'fast' is not 'always' or a whole "
        "positive duration such as 500ms, 1s or 2m"
    )
