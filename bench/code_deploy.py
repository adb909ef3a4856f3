"""``python -m bench --only code-deploy``: apply → Ready of a workflow with code and one
requirement, the first time (the local backend makes the digest's virtualenv and pip
installs the requirement) and a second revision of the same code (its environment is
reused: no pip).

Each repetition starts ``plnt up``'s stack on a fresh data directory (so "first" finds no
environment), applies the local PlntBackend, publishes 1.0.0 and 2.0.0 of the demo's
workflow into a file registry with the same code archive (``runtime.code``: an entrypoint
module that imports the requirement and runs plnt's runner), applies the run at 1.0.0
until Ready, then at 2.0.0 until Ready. pip installs offline from a wheel the bench
builds (``PIP_NO_INDEX=1``, ``PIP_FIND_LINKS``; the test kit's ``build_wheel``,
``code_archive`` and ``offline_pip_env``). The local backend's log must show pip ran
exactly once per repetition, else the repetition fails.
"""

import asyncio
import copy
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.deploy import EXAMPLES, embedded_stack
from bench.runner_load import loaded_section
from bench.stats import percentile
from bench.table import Row, Verdict
from plnt_common.bus.bus import Bus
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import parse_resource
from plnt_common.workflow import spec_digest
from plnt_testkit.code_archives import build_wheel, code_archive, offline_pip_env, publish_code

NAME = "bench-code"
REQUIREMENT = "plnt_testwheel==1.0.0"
CODE_MAIN = """\
import runpy

import plnt_testwheel  # the requirement: the environment must hold it

runpy.run_module("plnt_runner", run_name="__main__", alter_sys=True)
"""
READY_TIMEOUT_S = 180.0


PLAIN = "bench-plain"
"""The same workflow without code (plnt's runner in the stack's Python): the reference."""


def _publish(registry: Path, version: str, archive: bytes | None, name: str = NAME) -> str:
    """The spec (with ``runtime.code`` when ``archive``) and its archive; returns the
    spec's digest."""
    spec = EXAMPLES / "registry" / "review-responder" / "1.2.0" / "workflow.yaml"
    document: dict[str, Any] = yaml.safe_load(spec.read_text())
    document["metadata"] = {"name": name, "version": version}
    if archive is not None:
        digest = publish_code(registry, name=name, version=version, archive=archive)
        document["spec"]["runtime"]["entrypoint"] = "python -m code_main"
        document["spec"]["runtime"]["code"] = {
            "archive": "code.tar.gz",
            "digest": digest,
            "requirements": [REQUIREMENT],
        }
    target = registry / name / version / "workflow.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(document, sort_keys=False))
    return spec_digest(target.read_bytes())


def _run(registry: Path, version: str, integrity: str, name: str = NAME) -> dict[str, Any]:
    run: dict[str, Any] = copy.deepcopy(yaml.safe_load((EXAMPLES / "workflowrun.yaml").read_text()))
    run["metadata"]["name"] = name
    run["spec"]["workflow"].update(
        ref=f"{name}@{version}", registry=registry.as_uri(), integrityHash=integrity
    )
    return run


async def _apply_until_ready(store: ResourceStore, run: dict[str, Any], generation: int) -> float:
    name = run["metadata"]["name"]
    started = time.perf_counter()
    await store.apply(parse_resource(run))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        stored = await store.get("WorkflowRun", "default", name)
        status = (stored.body.get("status") or {}) if stored else {}
        if status.get("observedGeneration") == generation:
            if status.get("phase") == "Ready":
                return time.perf_counter() - started
            if status.get("phase") in ("Failed", "RolledBack", "Reverted"):
                raise RuntimeError(f"{name} ended {status['phase']}: {status.get('message')}")
        await asyncio.sleep(0.01)
    raise RuntimeError(f"{name} generation {generation} not Ready in {READY_TIMEOUT_S:g} s")


async def _repetition(url: str, data_dir: Path) -> tuple[float, float, float]:
    registry = data_dir / "registry"
    archive = code_archive({"code_main.py": CODE_MAIN})
    first, second = _publish(registry, "1.0.0", archive), _publish(registry, "2.0.0", archive)
    plain = _publish(registry, "1.0.0", None, name=PLAIN)
    bus = await Bus.open(url, service="bench-code-deploy")
    try:
        store = ResourceStore(bus)
        backend = yaml.safe_load((EXAMPLES / "backend-local.yaml").read_text())
        await store.apply(parse_resource(backend))
        first_s = await _apply_until_ready(store, _run(registry, "1.0.0", first), 1)
        second_s = await _apply_until_ready(store, _run(registry, "2.0.0", second), 2)
        plain_s = await _apply_until_ready(store, _run(registry, "1.0.0", plain, PLAIN), 1)
    finally:
        await bus.close()
    return first_s, second_s, plain_s


def _pip_runs(data_dir: Path) -> int:
    log = data_dir / "logs" / "local-backend.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    return sum(1 for line in text.splitlines() if "code.requirements_installing" in line)


def code_deploy_figures(repetitions: int) -> list[Row]:
    firsts: list[float] = []
    seconds: list[float] = []
    plains: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        wheels = Path(tmp)
        build_wheel(wheels)
        env = {**offline_pip_env(wheels), "PLNT_INSTALLER_READY_TIMEOUT_S": "120"}
        for _ in range(repetitions):
            with embedded_stack(env) as config:
                first_s, second_s, plain_s = asyncio.run(
                    _repetition(config.nats_url, config.data_dir)
                )
                pips = _pip_runs(config.data_dir)
            if pips != 1:
                raise RuntimeError(f"pip ran {pips} times in one repetition, not once")
            firsts.append(first_s)
            seconds.append(second_s)
            plains.append(plain_s)
    return [
        _row(
            f"apply → Ready, code + 1 requirement, first time (venv + offline pip), "
            f"{repetitions} runs, a fresh data dir each",
            firsts,
        ),
        _row(
            "apply → Ready, a second revision of the same code (environment reused, no pip)",
            seconds,
        ),
        _row(
            "reference: apply → Ready of the same workflow without code, on the same stacks",
            plains,
        ),
    ]


def _row(label: str, samples: list[float]) -> Row:
    p50 = percentile(samples, 0.5)
    each = ", ".join(f"{s:.2f}" for s in samples)
    return Row(
        label,
        f"p50 {p50:.2f} s (range {min(samples):.2f} to {max(samples):.2f} s)",
        f"each run: {each} s",
        "",
        Verdict.INFO,
    )


def code_deploy_section(repetitions: int) -> None:
    loaded_section(
        "Deploying a workflow with code",
        "`plnt up`'s stack, the local backend, the demo workflow with a code archive and one "
        "requirement (a wheel the bench builds, installed offline).",
        lambda: code_deploy_figures(repetitions),
    )
