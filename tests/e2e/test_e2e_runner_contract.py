"""The runner contract on the real embedded stack: a runner that is not plnt's (the
standard-library example, shipped as the workflow's own code through ``runtime.code`` and
started by its ``runtime.entrypoint``) is smoke-tested against clauses 2-6 and serves; a
revision whose runner misses a clause is rolled back, reason RunnerContract, while the
stable revision keeps serving."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from stack_fixtures import start_stack
from stack_support import Client, invoke, publish_spec, run_document

from plnt_cli.supervisor import Supervisor
from plnt_testkit.code_archives import code_archive, publish_code
from plnt_testkit.stdlib_runner import RUNNER, WORKFLOW, broken_runner


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    supervisor = start_stack(tmp_path_factory.mktemp("stack"))
    yield supervisor
    supervisor.stop()


def publish_runner(registry: Path, *, name: str, version: str, runner: str) -> None:
    """The example's workflow.yaml with ``runner`` (a runner.py's text) as its code."""
    archive = code_archive({"runner.py": runner})
    digest = publish_code(registry, name=name, version=version, archive=archive)
    document: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    document["metadata"] = {"name": name, "version": version}
    assert document["spec"]["runtime"]["entrypoint"] == "python runner.py"
    document["spec"]["runtime"]["code"] = {"archive": "code.tar.gz", "digest": digest}
    publish_spec(registry, document)


async def test_a_canary_missing_a_clause_rolls_back_runner_contract_and_the_stable_serves(
    client: Client, registry: Path, tmp_path: Path
) -> None:
    publish_runner(registry, name="contract", version="1.0.0", runner=RUNNER.read_text())
    await client.apply(run_document("contract", registry=registry))
    ready = await client.wait_phase("contract", "Ready")
    endpoint = ready["status"]["endpoint"]
    code, revision, answer = await invoke(endpoint, {"text": "hello"})
    assert (code, revision) == (200, "1.0.0-g1")
    assert answer["output"] == {"echo": {"text": "hello"}}  # the example runner serves it

    broken = broken_runner(tmp_path, "no-tokens-header").read_text()
    publish_runner(registry, name="contract", version="2.0.0", runner=broken)
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
