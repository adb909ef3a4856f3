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

from plnt_common.workflow import KNOWN_TOOLS, Workflow, parse_workflow
from plnt_runner.app import create_app
from plnt_runner.ports import LLMProvider
from plnt_runner.settings import RunnerSettings

REPO = Path(__file__).resolve().parents[2]


def workflow_yaml(
    steps: Iterable[Mapping[str, Any]], *, name: str = "test-flow", **spec: Any
) -> bytes:
    """A valid Workflow spec with ``steps`` (and ``spec`` keys such as vars, input, tools).

    A step tool that is not built in is declared in ``spec.tools`` (``tests.fakes:<name>``)
    unless ``tools`` is given: tests hand the executor their own in-process tool registry."""
    steps = list(steps)
    if "tools" not in spec:
        own = sorted({s["tool"] for s in steps if s["tool"] not in KNOWN_TOOLS})
        if own:
            spec["tools"] = [{"name": t, "call": f"tests.fakes:{t.replace('.', '_')}"} for t in own]
    document = {
        "apiVersion": "microagents.dev/v1",
        "kind": "Workflow",
        "metadata": {"name": name, "version": "1.0.0"},
        "spec": {
            "runtime": {"image": "ghcr.io/example/runner:1", "entrypoint": "python -m flow"},
            "steps": steps,
            **spec,
        },
    }
    return yaml.safe_dump(document).encode()


def make_workflow(steps: Iterable[Mapping[str, Any]], **spec: Any) -> Workflow:
    return parse_workflow(workflow_yaml(steps, **spec))


# The review-responder example (examples/registry/review-responder/1.2.0/workflow.yaml),
# verbatim, so these tests do not depend on where the examples directory lives; a test in
# test_runner_offline.py checks that the two stay the same.
EXAMPLE_WORKFLOW = b"""\
# stored at <registry>/review-responder/1.2.0/workflow.yaml
# Every word about reviews, replies and brand voice is here, in the spec: plnt's runner
# knows none of it.
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
  vars:
    default_voice: friendly, professional, first-person plural
  input:                         # checked on every call: a mismatch answers 422
    type: object
    properties:
      review: {type: string}
      brand_voice: {type: string}
  steps:
    - id: classify_intent        # the review's overall sentiment
      tool: llm.classify
      with:
        system: You read customer reviews of a business and judge their overall sentiment.
        prompt: "Review: {{ input.review | default('') }}"
        labels: [positive, negative, mixed, neutral]
        temperature: 0
    - id: retrieve_brand_voice   # RAG from tenant KB
      tool: rag.query
      deps: [classify_intent]
      with:
        query: "{{ input.review | default('') }}"
        system: >-
          You are the brand-voice knowledge base of a business. From the review, its
          sentiment, the brand voice and the retrieved passages, state in two or three
          sentences how the reply to this review should sound and what it should address.
          Reply with plain text only.
        prompt: |
          Review: {{ input.review | default('') }}
          Sentiment: {{ steps.classify_intent.label }}
          Brand voice: {{ input.brand_voice | default(vars.default_voice) }}
          Passages: {{ passages | join(" ") }}
    - id: draft_reply
      tool: llm.generate
      deps: [retrieve_brand_voice]
      with:
        system: >-
          You draft the business's public reply to a customer's review. Follow the brand
          voice and the guidance. Reply with the reply text only, no preamble, at most 80
          words.
        prompt: |
          Review: {{ input.review | default('') }}
          Brand voice: {{ input.brand_voice | default(vars.default_voice) }}
          Guidance: {{ steps.retrieve_brand_voice.guidance }}
        max_tokens: 200
    - id: safety_check
      tool: policy.moderate
      deps: [draft_reply]
      with:
        system: You check a draft reply to a review before the business publishes it.
        prompt: "{{ steps.draft_reply.text }}"
        rules:
          - no insults, slurs or hate
          - no personal data such as email addresses or phone numbers
          - no promises of refunds or compensation and no admissions of legal liability
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
