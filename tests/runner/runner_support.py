"""Helpers of the runner tests (a plain module, not a conftest, so its name is unique in the
suite): workflow files from step lists, a runner on a real loopback port, an SSE reader."""

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from plnt_common.workflow import Workflow, parse_workflow
from plnt_runner.app import create_app
from plnt_runner.ports import LLMProvider
from plnt_runner.settings import RunnerSettings


def workflow_yaml(steps: Iterable[Mapping[str, Any]], *, name: str = "test-flow") -> bytes:
    """A valid Workflow spec with ``steps``."""
    document = {
        "apiVersion": "microagents.dev/v1",
        "kind": "Workflow",
        "metadata": {"name": name, "version": "1.0.0"},
        "spec": {
            "runtime": {"image": "ghcr.io/example/runner:1", "entrypoint": "python -m flow"},
            "steps": list(steps),
        },
    }
    return yaml.safe_dump(document).encode()


def make_workflow(steps: Iterable[Mapping[str, Any]]) -> Workflow:
    return parse_workflow(workflow_yaml(steps))


# The review-responder example of the design contract (examples/workflow.yaml), verbatim, so
# these tests do not depend on where the examples directory lives.
EXAMPLE_WORKFLOW = b"""\
apiVersion: microagents.dev/v1
kind: Workflow
metadata:
  name: review-responder
  version: 1.2.0
spec:
  description: Draft an on-brand reply to a Google Maps review.
  runtime:
    image: ghcr.io/microagents/runner:0.4.0
    entrypoint: python -m review_responder
  steps:
    - id: classify_intent        # sentiment + topic
      tool: llm.classify
    - id: retrieve_brand_voice   # RAG from tenant KB
      tool: rag.query
      deps: [classify_intent]
    - id: draft_reply
      tool: llm.generate
      deps: [retrieve_brand_voice]
    - id: safety_check
      tool: policy.moderate
      deps: [draft_reply]
  requirements:
    gpuClass: nvidia.com/h100
    gpuCount: 2
    memoryGiB: 40
"""
EXAMPLE_BODY = {
    "review": "Great service but slow parking",
    "brand_voice": "warm, concise, first-person plural",
}


def write_example(tmp_path: Path) -> Path:
    path = tmp_path / "workflow.yaml"
    path.write_bytes(EXAMPLE_WORKFLOW)
    return path


@asynccontextmanager
async def running_runner(
    settings: RunnerSettings, *, provider: LLMProvider | None = None
) -> AsyncIterator[tuple[str, aiohttp.ClientSession, web.Application]]:
    """The runner app on a free 127.0.0.1 port: (base URL, client session, app)."""
    app = create_app(settings, provider=provider)
    async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as session:
        yield str(server.make_url("")).rstrip("/"), session, app


async def eventually(check: Callable[[], Awaitable[bool]], *, within_s: float = 10.0) -> None:
    """Poll ``check`` until it holds; for state only visible through another process's API."""
    for _ in range(int(within_s / 0.01)):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"condition not met within {within_s}s")


async def read_sse(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, Any]]:
    """Yield ``(event, data)`` of a server-sent-events response as each event arrives."""
    event, data = "message", list[str]()
    async for raw in response.content:
        line = raw.decode().rstrip("\r\n")
        if not line:
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", list[str]()
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
