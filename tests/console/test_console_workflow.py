"""The playground's workflow route: the pulled spec read back by the run's digest, its
input schema turned into form fields and its steps into a DAG."""

import copy
from typing import Any

import pytest
import yaml
from console_support import Console
from test_console_api import put_run, wait_for_run

from plnt_common.projection import RunProjection
from plnt_common.resources import WorkflowRunStatus
from plnt_common.status import Phase
from plnt_common.workflow import spec_digest
from plnt_console.workflow_view import input_form

WORKFLOW: dict[str, Any] = {
    "apiVersion": "microagents.dev/v1",
    "kind": "Workflow",
    "metadata": {"name": "triage", "version": "1.0.0"},
    "spec": {
        "runtime": {"image": "ghcr.io/microagents/runner:0.4.0"},
        "input": {
            "type": "object",
            "required": ["ticket"],
            "properties": {
                "ticket": {"type": "string", "title": "Ticket text"},
                "priority": {"enum": ["low", "high"]},
                "budget": {"type": "number"},
                "attempts": {"type": "integer"},
                "urgent": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
        },
        "steps": [
            {
                "id": "classify",
                "tool": "llm.classify",
                "with": {"prompt": "{{ input.ticket }}", "labels": ["a", "b"]},
            },
            {"id": "draft", "tool": "llm.generate", "deps": ["classify"], "with": {"prompt": "x"}},
            {"id": "check", "tool": "llm.generate", "deps": ["classify"], "with": {"prompt": "y"}},
            {
                "id": "merge",
                "tool": "llm.generate",
                "deps": ["draft", "check"],
                "with": {"prompt": "z"},
            },
        ],
    },
}


def pulled(name: str, digest: str, phase: Phase = Phase.READY) -> RunProjection:
    return RunProjection(
        namespace="default",
        name=name,
        saga_id=f"default.{name}.1.1",
        generation=1,
        status=WorkflowRunStatus(phase=phase, revision="1.0.0-g1", specDigest=digest),
    )


async def store_spec(console: Console, document: dict[str, Any]) -> str:
    raw = yaml.safe_dump(document, sort_keys=False).encode()
    digest = spec_digest(raw)
    await console.bus.specs.put(digest, raw)
    return digest


async def get_workflow(console: Console, name: str) -> tuple[int, dict[str, Any]]:
    async with console.http.get(f"{console.url}/api/runs/default/{name}/workflow") as response:
        return response.status, await response.json()


async def test_the_route_serves_the_pulled_workflows_form_and_dag(console: Console) -> None:
    digest = await store_spec(console, WORKFLOW)
    await put_run(console, pulled("triage", digest))
    await wait_for_run(console, "triage")
    status, body = await get_workflow(console, "triage")
    assert status == 200, body
    assert (body["name"], body["version"], body["digest"]) == ("triage", "1.0.0", digest)
    assert body["input"] == WORKFLOW["spec"]["input"]
    assert [(f["name"], f["kind"], f["required"]) for f in body["form"]] == [
        ("ticket", "string", True),
        ("priority", "enum", False),
        ("budget", "number", False),
        ("attempts", "integer", False),
        ("urgent", "boolean", False),
    ]
    assert body["steps"] == [
        {"id": "classify", "tool": "llm.classify", "needs": []},
        {"id": "draft", "tool": "llm.generate", "needs": ["classify"]},
        {"id": "check", "tool": "llm.generate", "needs": ["classify"]},
        {"id": "merge", "tool": "llm.generate", "needs": ["draft", "check"]},
    ]


async def test_a_run_that_has_not_pulled_yet_says_so(console: Console) -> None:
    await put_run(console, pulled("early", "", Phase.PULLING))
    await wait_for_run(console, "early")
    status, body = await get_workflow(console, "early")
    assert status == 409
    assert body["error"] == "default/early has not pulled its workflow yet (phase Pulling)"


async def test_an_unknown_run_and_a_missing_spec_answer_404(console: Console) -> None:
    status, body = await get_workflow(console, "nope")
    assert status == 404
    assert body["error"] == "workflowruns 'nope' not found in namespace 'default'"
    await put_run(console, pulled("gone", "sha256:" + "0" * 64))
    await wait_for_run(console, "gone")
    status, body = await get_workflow(console, "gone")
    assert status == 404
    assert "is not in the object store plnt-specs" in body["error"]


async def test_spec_bytes_that_do_not_parse_answer_422_naming_the_problem(console: Console) -> None:
    raw = b"kind: [unclosed"
    digest = spec_digest(raw)
    await console.bus.specs.put(digest, raw)
    await put_run(console, pulled("broken", digest))
    await wait_for_run(console, "broken")
    status, body = await get_workflow(console, "broken")
    assert status == 422
    assert body["error"].startswith("spec is not valid YAML")


def schema_of(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


@pytest.mark.parametrize(
    ("schema", "fields"),
    [
        (None, None),
        ({"type": "string"}, None),
        ({"type": "object"}, None),
        (schema_of(tags={"type": "array"}, meta={"type": "object"}), []),
        (schema_of(n={"type": ["string", "null"]}), []),
        (schema_of(mode={"enum": [{"a": 1}]}), []),
        (
            schema_of(flag={"type": "boolean", "description": "on or off"}),
            [
                {
                    "name": "flag",
                    "title": "flag",
                    "kind": "boolean",
                    "required": False,
                    "description": "on or off",
                }
            ],
        ),
        (
            {**schema_of(size={"enum": [1, 2], "title": "Size"}), "required": ["size"]},
            [
                {
                    "name": "size",
                    "title": "Size",
                    "kind": "enum",
                    "required": True,
                    "description": "",
                    "options": [1, 2],
                }
            ],
        ),
    ],
    ids=[
        "no-schema",
        "not-an-object",
        "no-properties",
        "object-and-array-stay-in-the-json-body",
        "a-union-stays-in-the-json-body",
        "an-enum-of-objects-stays-in-the-json-body",
        "boolean",
        "required-enum",
    ],
)
def test_input_form_fields_from_a_schema(schema: Any, fields: Any) -> None:
    assert input_form(copy.deepcopy(schema)) == fields
