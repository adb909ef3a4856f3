"""The Workflow spec's own tools and code (``spec.tools``, ``runtime.code``): each
problem refused with one line naming it, a valid spec read as written."""

from typing import Any

import pytest
import yaml

from plnt_common.errors import SpecInvalid
from plnt_common.workflow import DEFAULT_ENTRYPOINT, parse_workflow

DIGEST = "sha256:" + "ab" * 32


def _spec(**spec: Any) -> bytes:
    body: dict[str, Any] = {
        "runtime": {
            "image": "ghcr.io/acme/ticket-triage:1.0.0",
            "code": {"archive": "code.tar.gz", "digest": DIGEST, "requirements": ["rapidfuzz>=3"]},
        },
        "tools": [{"name": "crm.lookup", "call": "ticket_triage.tools:lookup"}],
        "steps": [{"id": "customer", "tool": "crm.lookup"}],
    }
    body.update(spec)
    return yaml.safe_dump(
        {
            "apiVersion": "microagents.dev/v1",
            "kind": "Workflow",
            "metadata": {"name": "ticket-triage", "version": "1.0.0"},
            "spec": body,
        }
    ).encode()


def test_a_workflow_with_its_own_tool_and_code_is_read_as_written() -> None:
    spec = parse_workflow(_spec()).spec

    assert spec.runtime.entrypoint == DEFAULT_ENTRYPOINT
    assert spec.runtime.code is not None
    assert (spec.runtime.code.archive, spec.runtime.code.digest) == ("code.tar.gz", DIGEST)
    assert spec.runtime.code.requirements == ("rapidfuzz>=3",)
    tool = spec.code_tool("crm.lookup")
    assert tool is not None and (tool.call, tool.side_effects, tool.timeout_s) == (
        "ticket_triage.tools:lookup",
        False,
        30.0,
    )
    assert spec.code_tool("llm.chat") is None


CASES = [
    (
        {"steps": [{"id": "customer", "tool": "crm.lokup"}]},
        "step 'customer': unknown tool 'crm.lokup'",
    ),
    (
        {"tools": [{"name": "llm.chat", "call": "a:b"}]},
        "tool name 'llm.chat' is a built-in tool's",
    ),
    (
        {
            "tools": [
                {"name": "crm.lookup", "call": "a:b"},
                {"name": "crm.lookup", "call": "a:c"},
            ]
        },
        "crm.lookup declared more than once",
    ),
    ({"tools": [{"name": "crm.lookup", "call": "tools.lookup"}]}, "must be module:function"),
    ({"tools": [{"name": "lookup", "call": "a:b"}]}, "must be dotted lowercase"),
    (
        {"tools": [{"name": "crm.lookup", "call": "a:b", "timeout": "forever"}]},
        "must be a duration",
    ),
    (
        {"tools": [{"name": "crm.lookup", "call": "a:b", "sideEfects": True}]},
        "sideEfects: Extra inputs are not permitted",
    ),
    (
        {"runtime": {"image": "x", "code": {"archive": "../code.tar.gz", "digest": DIGEST}}},
        "must be a file name beside workflow.yaml",
    ),
    (
        {"runtime": {"image": "x", "code": {"archive": "code.tar.gz", "digest": "sha256:12"}}},
        "digest must be sha256",
    ),
    (
        {
            "runtime": {
                "image": "x",
                "code": {"archive": "c.tgz", "digest": DIGEST, "requirements": ["rapid fuzz"]},
            }
        },
        "requirement 'rapid fuzz' is not a pip requirement",
    ),
]


@pytest.mark.parametrize(
    ("change", "message"),
    CASES,
    ids=[
        "unknown-tool",
        "shadows-builtin",
        "duplicate-tool",
        "call-without-function",
        "undotted-name",
        "bad-timeout",
        "typo-key",
        "archive-escapes",
        "short-digest",
        "bad-requirement",
    ],
)
def test_a_problem_in_tools_or_code_is_refused_naming_it(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecInvalid, match="spec is invalid: .*" + message.replace("(", r"\(")):
        parse_workflow(_spec(**change))
