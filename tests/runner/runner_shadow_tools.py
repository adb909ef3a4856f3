"""The workflow's own tools in the shadow-call tests, imported by the runner under test as
``runner_shadow_tools:<function>`` (a plain module beside the tests, so its name is unique).

``notify`` acts on the world (declared ``sideEffects: true``), ``lookup`` only reads; both
POST to the test's sink with ``plnt_runner.outbound_headers()``, as a tool author would.
``gate`` holds an invocation until the test releases it, then notes what
``plnt_runner.is_shadow()`` said for it.
"""

import asyncio
import json
import urllib.request
from typing import Any

import plnt_runner

GATES: dict[str, asyncio.Event] = {}
"""Input text -> the event that releases that invocation's ``gate`` step."""
ARRIVED: dict[str, asyncio.Event] = {}
"""Input text -> set once that invocation waits at its ``gate`` step."""
SEEN_SHADOW: dict[str, bool] = {}
"""Input text -> ``plnt_runner.is_shadow()`` inside that invocation, after its gate opened."""


async def gate(argument: dict[str, Any]) -> dict[str, Any]:
    text = argument["input"]["text"]
    if text in GATES:
        ARRIVED[text].set()
        await GATES[text].wait()
    SEEN_SHADOW[text] = plnt_runner.is_shadow()
    return {"text": text}


def notify(argument: dict[str, Any]) -> Any:
    """A side effect: runs in a worker thread, as plain functions do."""
    return _post(argument["with"]["url"], argument)


def lookup(argument: dict[str, Any]) -> Any:
    return _post(argument["with"]["url"], argument)


def _post(url: str, argument: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url,
        data=json.dumps(argument).encode(),
        headers={"Content-Type": "application/json", **plnt_runner.outbound_headers()},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())
