"""What a newcomer runs, as a user runs it: the shipped example, large runs, the demo.

Real subprocesses of ``plnt`` against a real embedded stack (one per module).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from stack_support import EXAMPLES, publish_spec, run_document, workflow_named

from plnt_cli.supervisor import Supervisor


def plnt(
    *args: str, home: Path, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PLNT_NATS_URL"}
    env["PLNT_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "plnt_cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


@pytest.fixture
def nats(stack: Supervisor) -> list[str]:
    return ["--nats", stack.config.nats_url]


def test_the_shipped_local_workflowrun_deploys_and_answers_from_any_directory(
    nats: list[str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    for manifest in ("backend-local.yaml", "workflowrun-local.yaml"):
        applied = plnt(*nats, "apply", "-f", str(EXAMPLES / manifest), home=home, cwd=tmp_path)
        assert applied.returncode == 0, applied.stderr
    waited = plnt(
        *nats, "wait", "wr", "review-responder", "--for", "phase=Ready", "--timeout", "90s",
        home=home,
    )  # fmt: skip
    assert waited.returncode == 0, waited.stdout + waited.stderr
    stored = json.loads(
        plnt(*nats, "get", "wr", "review-responder", "-o", "json", home=home).stdout
    )
    assert stored["spec"]["workflow"]["registry"] == (EXAMPLES / "registry").as_uri()
    assert stored["status"]["phase"] == "Ready"
    invoked = plnt(
        *nats, "invoke", "review-responder", "--data", f"@{EXAMPLES / 'invoke.json'}", home=home
    )
    assert invoked.returncode == 0, invoked.stderr
    assert "parking" in json.loads(invoked.stdout)["output"]["reply"]


def test_wait_reports_ready_and_deleted_truthfully_for_a_run_with_a_large_payload(
    nats: list[str], registry: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    assert (
        plnt(*nats, "apply", "-f", str(EXAMPLES / "backend-local.yaml"), home=home).returncode == 0
    )
    publish_spec(registry, workflow_named("large-run"))
    document = run_document("large-run", registry=registry)
    # 520 KB that the steps pass over (a review that long takes the runner seconds a call)
    document["spec"]["smokeTest"]["payload"] = {"review": "Slow parking", "notes": "x" * 520_000}
    manifest = tmp_path / "run.yaml"
    manifest.write_text(yaml.safe_dump(document))
    assert plnt(*nats, "apply", "-f", str(manifest), home=home).returncode == 0

    waited = plnt(*nats, "wait", "wr", "large-run", "--for", "phase=Ready", home=home)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    stored = json.loads(plnt(*nats, "get", "wr", "large-run", "-o", "json", home=home).stdout)
    assert stored["status"]["phase"] == "Ready"

    requested = plnt(*nats, "delete", "wr", "large-run", "--timeout", "0", home=home)
    assert "deletion requested" in requested.stdout, requested.stderr
    gone = plnt(*nats, "wait", "wr", "large-run", "--for", "delete", home=home)
    # "deleted", or "not found" when the cleanup was over before the wait began
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout.strip() in {
        "workflowrun.plnt.work/large-run deleted",
        "workflowrun.plnt.work/large-run not found",
    }
    left = plnt(*nats, "get", "wr", "large-run", home=home)
    assert left.returncode == 1 and "not found" in left.stderr


def test_the_demo_leaves_the_pointer_of_a_running_plnt_up_alone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    running_up = subprocess.Popen(["sleep", "600"])  # stands for the `plnt up` process
    try:
        pointer = home / "up.json"
        pointer.write_text(
            json.dumps(
                {
                    "pid": running_up.pid,
                    "nats_url": "nats://127.0.0.1:4222",
                    "router_url": "http://127.0.0.1:8080",
                    "data_dir": str(tmp_path / "up-data"),
                }
            )
        )
        before = pointer.read_text()
        demo = plnt("demo", home=home, timeout=240)
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "Drafted reply:" in demo.stdout
        assert pointer.read_text() == before
    finally:
        running_up.kill()
        running_up.wait()
