"""The runner contract on the real embedded stack: runners that are not plnt's (the
standard-library example, started by the local backend as its runner command) are smoke-
tested against clauses 2-6; one that misses a clause is rolled back, reason RunnerContract,
while the stable revision keeps serving."""

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from stack_fixtures import start_stack
from stack_support import Client, invoke, publish_spec, run_document, workflow_named

from plnt_cli.supervisor import Supervisor
from plnt_testkit.stdlib_runner import RUNNER, broken_runner

PICK = """\
import os, sys
spec = open(os.environ["PLNT_RUNNER_WORKFLOW_FILE"]).read()
with open({pids!r}, "a") as pids:
    pids.write(f"{{os.getpid()}}\\n")
script = {broken!r} if "version: 2.0.0" in spec else {good!r}
os.execv(sys.executable, [sys.executable, script])
"""
"""The local backend's runner command: the example runner for 1.0.0, a broken one for 2.0.0."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    directory = tmp_path_factory.mktemp("runners")
    pids = directory / "pids"
    broken = broken_runner(directory, "no-tokens-header")
    pick = directory / "pick.py"
    pick.write_text(PICK.format(pids=str(pids), broken=str(broken), good=str(RUNNER)))
    command = f'["{sys.executable}", "{pick}"]'
    supervisor = start_stack(
        tmp_path_factory.mktemp("stack"), env={"PLNT_LOCAL_BACKEND_RUNNER_COMMAND": command}
    )
    yield supervisor
    supervisor.stop()
    # the example runner does not watch PLNT_RUNNER_EXIT_WITH_PID: stop the ones it started
    for pid in (int(line) for line in pids.read_text().split()) if pids.exists() else ():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def test_a_canary_missing_a_clause_rolls_back_runner_contract_and_the_stable_serves(
    client: Client, registry: Path
) -> None:
    publish_spec(registry, workflow_named("contract"))
    await client.apply(run_document("contract", registry=registry))
    ready = await client.wait_phase("contract", "Ready")
    endpoint = ready["status"]["endpoint"]
    code, revision, answer = await invoke(endpoint, {"text": "hello"})
    assert (code, revision) == (200, "1.0.0-g1")
    assert answer["output"] == {"echo": {"text": "hello"}}  # the example runner serves it

    publish_spec(registry, workflow_named("contract", "2.0.0"))
    await client.apply(run_document("contract", registry=registry, ref="contract@2.0.0"))
    body = await client.wait_phase("contract", "RolledBack", generation=2)
    status = body["status"]
    missed = "runner contract v1: clause 3 invoke: response lacks the x-plnt-tokens header"
    conditions = {condition["type"]: condition for condition in status["conditions"]}
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == (
        "True",
        "RunnerContract",
    )
    assert conditions["SmokePassed"]["reason"] == "RunnerContract"
    assert status["message"] == f"rolled back 2.0.0-g2: {missed}; 1.0.0-g1 keeps serving"
    assert status["smoke"]["invocations"] == 0
    assert status["revision"] == "1.0.0-g1"
    for _ in range(5):
        code, revision, _ = await invoke(endpoint, {"text": "hello"})
        assert (code, revision) == (200, "1.0.0-g1")
