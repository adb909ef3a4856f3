"""A workflow's own code on the real embedded stack: the puller fetches and verifies the
archive beside the spec, the local backend makes its environment once per digest (pip
installs from a local wheel directory only: PIP_NO_INDEX, PIP_FIND_LINKS) and starts the
entrypoint there; bad code, a requirement pip cannot install and an entrypoint that exits
at once each end the run with their reason while the stable revision keeps serving.
"""

import asyncio
import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stack_fixtures import start_stack
from stack_support import BACKEND, Client, invoke, publish_spec, run_document, workflow_named
from test_e2e_saga import EXAMPLE_BODY

from plnt_cli.supervisor import Supervisor
from plnt_common.events import EventType
from plnt_common.releases import release_name
from plnt_testkit.code_archives import build_wheel, code_archive, offline_pip_env, publish_code

REQUIREMENT = "plnt_testwheel==1.0.0"

CODE_MAIN = '''\
"""The workflow's entrypoint: imports its requirement, checks it runs from the archive's
root, leaves a mark beside its workflow file, then serves with plnt's runner."""
import os
import pathlib
import runpy
import sys

import plnt_testwheel

if not pathlib.Path("code_main.py").is_file():
    sys.exit(f"the working directory {os.getcwd()} is not the archive's root")
workflow = pathlib.Path(os.environ["PLNT_RUNNER_WORKFLOW_FILE"])
workflow.with_name("code-ran").write_text(plnt_testwheel.VERSION)
runpy.run_module("plnt_runner", run_name="__main__", alter_sys=True)
'''

SAID: list[str] = []
"""What the stack's ``plnt up`` said on its console."""

READY_S = 90.0
"""Apply to Ready with a code environment to make (venv, pip from a local directory)."""


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("wheels")
    build_wheel(directory)
    return directory


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, wheels: Path) -> Iterator[Supervisor]:
    env = {
        **offline_pip_env(wheels),
        # one restart of a runner that exits, soon: a failed start ends the run in seconds
        "PLNT_LOCAL_BACKEND_MAX_RESTARTS": "1",
        "PLNT_LOCAL_BACKEND_RESTART_BACKOFF_INITIAL_S": "0.2",
        "PLNT_INSTALLER_READY_TIMEOUT_S": str(READY_S),
    }
    supervisor = start_stack(tmp_path_factory.mktemp("code"), env=env, say=SAID.append)
    yield supervisor
    supervisor.stop()


def with_code(
    document: dict[str, Any],
    *,
    digest: str,
    requirements: list[str],
    entrypoint: str = "python -m code_main",
) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    changed["spec"]["runtime"]["entrypoint"] = entrypoint
    changed["spec"]["runtime"]["code"] = {
        "archive": "code.tar.gz",
        "digest": digest,
        "requirements": requirements,
    }
    return changed


def publish_with_code(
    registry: Path,
    name: str,
    version: str,
    archive: bytes,
    *,
    requirements: list[str] | None = None,
    entrypoint: str = "python -m code_main",
    digest: str | None = None,
) -> str:
    """The spec and its archive in the registry; returns the archive's digest."""
    published = publish_code(registry, name=name, version=version, archive=archive)
    document = with_code(
        workflow_named(name, version),
        digest=digest or published,
        requirements=[REQUIREMENT] if requirements is None else requirements,
        entrypoint=entrypoint,
    )
    publish_spec(registry, document)
    return published


def our_code(tag: str) -> bytes:
    """An archive of its own per test (``tag``), so digests and environments differ."""
    return code_archive({"code_main.py": f"# {tag}\n{CODE_MAIN}", "README": tag})


def installs(stack: Supervisor, digest: str) -> int:
    """How often the local-backend ran pip for ``digest`` (its log line before each run)."""
    log = (stack.log_dir / f"local-backend-{BACKEND}.log").read_text(errors="replace")
    return sum(
        1 for line in log.splitlines() if "code.requirements_installing" in line and digest in line
    )


async def said(text: str, *, timeout_s: float = 5.0) -> None:
    """``plnt up`` printed ``text`` (its supervisor follows the services' logs)."""
    deadline = time.monotonic() + timeout_s
    while text not in SAID:
        assert time.monotonic() < deadline, f"plnt up never said {text!r}; it said {SAID}"
        await asyncio.sleep(0.1)


def release_dir(stack: Supervisor, release: str) -> Path:
    return stack.config.data_dir / "local-backend" / BACKEND / "releases" / "default" / release


async def terminal_of(client: Client, name: str, generation: int) -> tuple[EventType, Any]:
    for event in await client.events(name):
        if event.event_type.is_terminal and event.generation == generation:
            return event.event_type, event.payload()
    raise AssertionError(f"{name} generation {generation} has no terminal event")


async def stable_serving(client: Client, registry: Path, name: str) -> str:
    """Version 1.0.0 (plnt's runner, no code) Ready; its endpoint."""
    publish_spec(registry, workflow_named(name))
    await client.apply(run_document(name, registry=registry))
    ready = await ended(client, name, "Ready")
    endpoint: str = ready["status"]["endpoint"]
    return endpoint


TERMINAL = frozenset({"Ready", "RolledBack", "Failed", "Reverted"})


async def ended(
    client: Client, name: str, phase: str, *, generation: int = 1, timeout_s: float = READY_S
) -> dict[str, Any]:
    """The run once its saga for ``generation`` ended, which must be in ``phase``: another
    end fails at once, with the run's message, rather than waiting out the timeout."""

    def over(body: dict[str, Any] | None) -> bool:
        status = (body or {}).get("status") or {}
        return status.get("observedGeneration") == generation and status.get("phase") in TERMINAL

    body = await client.wait_for(name, over, timeout_s=timeout_s, what=f"to end {phase}")
    assert body is not None
    status = body["status"]
    assert status["phase"] == phase, f"{name} ended {status['phase']}: {status.get('message')}"
    return body


def reasons(body: dict[str, Any]) -> set[str]:
    """The reasons of the run's conditions."""
    return {c["reason"] for c in body["status"]["conditions"]}


async def assert_stable_serves(endpoint: str) -> None:
    for _ in range(5):
        code, revision, _ = await invoke(endpoint, EXAMPLE_BODY)
        assert (code, revision) == (200, "1.0.0-g1")


async def test_code_with_a_requirement_deploys_ready_imports_it_and_a_second_revision_skips_pip(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "with-code"
    archive = our_code(name)
    digest = publish_with_code(registry, name, "1.0.0", archive)
    publish_with_code(registry, name, "2.0.0", archive)

    started = time.monotonic()
    await client.apply(run_document(name, registry=registry))
    ready = await ended(client, name, "Ready")
    first_s = time.monotonic() - started
    assert (
        release_dir(stack, release_name("default", name, 1)) / "code-ran"
    ).read_text() == "1.0.0"
    code, revision, answer = await invoke(ready["status"]["endpoint"], EXAMPLE_BODY)
    assert (code, revision) == (200, "1.0.0-g1"), answer
    assert installs(stack, digest) == 1
    await said(f"installing requirements for {digest} (1 requirement)")

    started = time.monotonic()
    await client.apply(run_document(name, registry=registry, ref=f"{name}@2.0.0"))
    await ended(client, name, "Ready", generation=2)
    second_s = time.monotonic() - started
    assert (
        release_dir(stack, release_name("default", name, 2)) / "code-ran"
    ).read_text() == "1.0.0"
    assert installs(stack, digest) == 1, "the second revision of the same code ran pip again"
    print(f"apply -> Ready with code and 1 requirement: {first_s:.1f}s, cached: {second_s:.1f}s")


async def test_two_runs_sharing_code_applied_together_install_it_once(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    archive = our_code("shared")
    names = ["shared-a", "shared-b"]
    digests = {publish_with_code(registry, name, "1.0.0", archive) for name in names}
    (digest,) = digests
    await asyncio.gather(*(client.apply(run_document(name, registry=registry)) for name in names))
    for name in names:
        await ended(client, name, "Ready")
        assert (
            release_dir(stack, release_name("default", name, 1)) / "code-ran"
        ).read_text() == "1.0.0"
    assert installs(stack, digest) == 1


async def test_an_archive_that_does_not_match_its_digest_fails_code_invalid_and_starts_nothing(
    client: Client, registry: Path
) -> None:
    name = "code-mismatch"
    endpoint = await stable_serving(client, registry, name)
    pinned = publish_with_code(registry, name, "2.0.0", our_code("pinned"))
    publish_code(registry, name=name, version="2.0.0", archive=our_code("swapped"))
    await client.apply(run_document(name, registry=registry, ref=f"{name}@2.0.0"))

    body = await ended(client, name, "Failed", generation=2)
    kind, data = await terminal_of(client, name, 2)
    assert (kind, data.reason.value) == (EventType.RUN_FAILED, "CodeInvalid")
    assert pinned in body["status"]["message"] and "does not match its digest" in data.message
    assert reasons(body) >= {"CodeInvalid"}, body["status"]["conditions"]
    assert await client.release_keys(name) == [
        f"desired.default.{release_name('default', name, 1)}",
        f"observed.default.{release_name('default', name, 1)}",
    ]
    await assert_stable_serves(endpoint)


async def test_a_requirement_pip_cannot_install_rolls_back_dependencies_failed_naming_it(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "code-deps"
    endpoint = await stable_serving(client, registry, name)
    missing = "plnt_testwheel_absent>=1"
    publish_with_code(registry, name, "2.0.0", our_code(name), requirements=[missing])
    await client.apply(run_document(name, registry=registry, ref=f"{name}@2.0.0"))

    body = await ended(client, name, "RolledBack", generation=2)
    kind, data = await terminal_of(client, name, 2)
    assert (kind, data.reason.value) == (EventType.RUN_ROLLED_BACK, "DependenciesFailed")
    assert f"pip could not install {missing}" in data.message, data.message
    assert reasons(body) >= {"DependenciesFailed"}, body["status"]["conditions"]
    assert body["status"]["revision"] == "1.0.0-g1"
    assert not (release_dir(stack, release_name("default", name, 2)) / "code-ran").exists()
    await assert_stable_serves(endpoint)


async def test_an_entrypoint_that_exits_at_once_rolls_back_with_its_last_stderr_lines(
    client: Client, registry: Path
) -> None:
    name = "code-exits"
    endpoint = await stable_serving(client, registry, name)
    publish_with_code(
        registry,
        name,
        "2.0.0",
        our_code(name),
        requirements=[],
        entrypoint="python -c \"import sys; sys.exit('the code refuses to start')\"",
    )
    await client.apply(run_document(name, registry=registry, ref=f"{name}@2.0.0"))

    body = await ended(client, name, "RolledBack", generation=2)
    kind, data = await terminal_of(client, name, 2)
    assert kind is EventType.RUN_ROLLED_BACK
    assert "runner exited with code 1" in data.message, data.message
    assert "the code refuses to start" in data.message, data.message
    assert body["status"]["revision"] == "1.0.0-g1"
    await assert_stable_serves(endpoint)
