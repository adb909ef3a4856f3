"""``plnt demo``: start the embedded stack, deploy the example workflow, invoke it, stop.

Every step prints as it happens; the saga's events stream in live. The demo runs in a
fresh data directory (removed afterwards unless ``--keep``), so a second run never sees
the first one's state, and picks free ports when 4222 or 8080 are taken. It applies the
shipped example files as ``plnt apply -f`` reads them, and it does not record itself as
the running stack: a ``plnt up`` running meanwhile keeps its ``up.json``.
"""

import asyncio
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from plnt_cli.commands import Session, wait_for_phase
from plnt_cli.documents import parse_documents, read_documents
from plnt_cli.progress import SagaFollower
from plnt_cli.supervisor import StackConfig, Supervisor
from plnt_cli.up import stack_config, wait_until_ready
from plnt_common import event_loop
from plnt_common.errors import PlntError
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import Resource, WorkflowRun

RUN_NAME = "review-responder"
SAGA_TIMEOUT_S = 180.0
EXAMPLE_FILES = ("backend-local.yaml", "workflowrun-local.yaml")


def examples_dir() -> Path:
    """The repository's examples/, beside the source tree this CLI runs from."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "examples" / EXAMPLE_FILES[-1]
        if candidate.is_file():
            return candidate.parent
    raise PlntError("examples/ not found: run plnt demo from a clone installed with pip install -e")


def example_resources(examples: Path) -> list[Resource]:
    """The example backend and WorkflowRun, read and validated as ``plnt apply`` does."""
    documents = [
        document for name in EXAMPLE_FILES for document in read_documents(str(examples / name))
    ]
    return parse_documents(documents, namespace=None)


async def deploy_and_invoke(
    config: StackConfig, resources: list[Resource], *, say: Callable[[str], None]
) -> int:
    say(
        "→ starting NATS JetStream and the services "
        "(watcher, puller, installer, smoke, promoter, local-backend, router)…"
    )
    started = time.monotonic()
    await wait_until_ready(config)
    say(
        f"  ready in {time.monotonic() - started:.1f}s: "
        f"NATS {config.nats_url}, router {config.router_url}"
    )

    workflow = next(r for r in resources if isinstance(r, WorkflowRun)).spec.workflow
    say(
        f"→ {workflow.ref} from the file registry {workflow.registry} "
        f"(pinned to {str(workflow.integrity_hash)[:19]}…)"
    )

    session = await Session.open(config.nats_url)
    try:
        follower = SagaFollower(namespace="default", name=RUN_NAME, say=say)
        await follower.follow(session.bus.js)
        store = ResourceStore(session.bus)
        applied_at = time.monotonic()
        for resource in resources:
            _, outcome = await store.apply(resource)
            say(f"→ {resource.kind.lower()}.plnt.work/{resource.metadata.name} {outcome}")
        say("→ saga progress:")
        try:
            await asyncio.wait_for(follower.finished.wait(), timeout=SAGA_TIMEOUT_S)
        except TimeoutError:
            raise PlntError(
                f"the saga did not finish within {SAGA_TIMEOUT_S:g}s; see {config.data_dir}/logs"
            ) from None
        terminal = follower.terminal
        assert terminal is not None
        if terminal.event_type.value != "run.ready":
            raise PlntError(
                f"the rollout ended {terminal.event_type.value}: {terminal.data.get('message', '')}"
            )
        body = await wait_for_phase(
            session,
            name=RUN_NAME,
            namespace="default",
            phase="Ready",
            timeout_s=30,
            say=lambda _: None,
        )
        say(f"  apply → Ready in {time.monotonic() - applied_at:.2f}s")
        endpoint = body["status"]["endpoint"]
    finally:
        await session.close()
    body = json.loads((examples_dir() / "invoke.json").read_text())
    return await invoke_example(endpoint, body, say=say)


async def invoke_example(endpoint: str, body: dict[str, Any], *, say: Callable[[str], None]) -> int:
    say(f"→ POST {endpoint}")
    say(f"  {json.dumps(body)}")
    started = time.perf_counter()
    async with aiohttp.ClientSession() as http, http.post(endpoint, json=body) as response:
        answer = await response.json()
        revision = response.headers.get("x-plnt-revision", "")
    elapsed_ms = (time.perf_counter() - started) * 1000
    if response.status != 200:
        raise PlntError(f"invoke answered {response.status}: {answer}")
    output = answer.get("output", {})
    say(
        f"← 200 from revision {revision} in {elapsed_ms:.1f} ms "
        f"(provider: {answer.get('provider', '?')})"
    )
    say("")
    say("  Drafted reply:")
    say(f"    {output.get('reply') or json.dumps(output)}")
    say("")
    say("  Step timings:")
    steps = answer.get("steps", {})
    for step_id, step in steps.items():
        cached = " (cached)" if step.get("cached") else ""
        say(f"    {step_id:<22} {step.get('duration_ms', 0):8.2f} ms{cached}")
    say(f"    {'total (runner)':<22} {answer.get('duration_ms', 0):8.2f} ms")
    if steps and all(step.get("cached") for step in steps.values()):
        say("    (every step came from the step cache: the smoke test sent this same body)")
    return 0


def run_demo(
    *,
    data_dir: Path | None,
    nats_port: int | None,
    router_port: int | None,
    keep: bool,
    say: Callable[[str], None],
) -> int:
    resources = example_resources(examples_dir())  # a bad example fails before anything starts
    config = stack_config(
        data_dir=data_dir,
        nats_port=nats_port,
        router_port=router_port,
        replicas=1,
        say=say,
        fresh=data_dir is None,
    )
    stack = Supervisor(config, say=say)  # not up.Stack: that records itself in up.json
    stack.start()
    try:
        code = event_loop.run(deploy_and_invoke(config, resources, say=say))
    except PlntError as exc:
        say(f"plnt demo: {exc}")
        say(f"  logs: {config.data_dir / 'logs'}")
        keep = True
        code = 1
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:  # a bug or an environment problem: one line, logs kept
        say(f"plnt demo: unexpected {type(exc).__name__}: {exc}")
        say(f"  logs: {config.data_dir / 'logs'}")
        keep = True
        code = 1
    finally:
        say("→ stopping the stack…")
        stack.stop()
    if not keep and data_dir is None:
        shutil.rmtree(config.data_dir, ignore_errors=True)
    elif code == 0:
        say(f"  data and logs kept in {config.data_dir}")
    say("done." if code == 0 else "")
    return code
