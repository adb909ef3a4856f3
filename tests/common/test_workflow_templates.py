"""What a spec's prompts, schemas and tools must be at pull time: each problem refused by
``parse_workflow`` in one line naming the step (or field) and the problem."""

from typing import Any

import pytest
import yaml

from plnt_common.errors import SpecInvalid
from plnt_common.templating import check_template
from plnt_common.workflow import parse_workflow


def spec(steps: list[dict[str, Any]], **extra: Any) -> bytes:
    return yaml.safe_dump(
        {
            "apiVersion": "microagents.dev/v1",
            "kind": "Workflow",
            "metadata": {"name": "flow", "version": "1.0.0"},
            "spec": {"runtime": {"image": "ghcr.io/acme/flow:1"}, "steps": steps, **extra},
        }
    ).encode()


CUSTOMER = {"id": "customer", "tool": "llm.chat"}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            spec([{"id": "route", "tool": "llm.chat", "with": {"prompt": "{{ input.text "}}]),
            "spec.steps[0]: step 'route' (llm.chat): with.prompt: template syntax error on "
            "line 1: unexpected end of template",
        ),
        (
            spec([{"id": "route", "tool": "llm.chat", "with": {"system": "{% if x %}open"}}]),
            "step 'route' (llm.chat): with.system: template syntax error on line 1",
        ),
        (
            spec(
                [
                    CUSTOMER,
                    {"id": "route", "tool": "llm.chat", "with": {"prompt": "{{ steps.customer }}"}},
                ]
            ),
            "spec.steps[1]: step 'route' (llm.chat): with.prompt: line 1 reads steps.customer, "
            "which is not a dependency of this step (deps: none)",
        ),
        (
            spec(
                [
                    CUSTOMER,
                    {"id": "other", "tool": "llm.chat"},
                    {
                        "id": "route",
                        "tool": "llm.generate",
                        "deps": ["other"],
                        "with": {"prompt": "Tier:\n{{ steps['customer'].tier }}"},
                    },
                ]
            ),
            "step 'route' (llm.generate): with.prompt: line 2 reads steps.customer, which is "
            "not a dependency of this step (deps: other)",
        ),
        (
            spec([{"id": "route", "tool": "llm.chat", "with": {"output": {"type": "objekt"}}}]),
            "step 'route' (llm.chat): with.output is not a JSON Schema: 'objekt' is not valid "
            "under any of the given schemas (at $.type)",
        ),
        (
            spec([{"id": "route", "tool": "llm.chat", "with": {"output": ["queue"]}}]),
            "with.output is not a JSON Schema: a schema is an object, got list",
        ),
        (
            spec([{"id": "route", "tool": "llm.chat", "with": {"promt": "Hello"}}]),
            "spec.steps[0]: step 'route' (llm.chat): unknown with key 'promt' (known: "
            "max_tokens, model, output, prompt, system, temperature)",
        ),
        (
            spec([{"id": "tag", "tool": "llm.classify", "with": {"output": {}}}]),
            "step 'tag' (llm.classify): unknown with key 'output'",
        ),
        (
            spec([CUSTOMER], tools=[{"name": "llm.chat", "call": "acme.tools:chat"}]),
            "spec.tools[0].name: tool name 'llm.chat' is a built-in tool's; choose another",
        ),
        (
            spec([CUSTOMER], input={"type": "object", "required": "text"}),
            "spec: input is not a JSON Schema: 'text' is not of type 'array' (at $.required)",
        ),
    ],
    ids=[
        "template-syntax-error",
        "unclosed-block",
        "steps-not-a-dep",
        "steps-item-not-a-dep",
        "output-not-a-schema",
        "output-not-an-object",
        "unknown-with-key",
        "output-on-classify",
        "tool-shadows-builtin",
        "input-not-a-schema",
    ],
)
def test_a_spec_problem_is_refused_in_one_line_naming_it(document: bytes, message: str) -> None:
    with pytest.raises(SpecInvalid) as refused:
        parse_workflow(document)
    text = str(refused.value)
    assert "\n" not in text
    assert message in text, text
    assert "; spec" not in text, text  # one problem, not a cascade


def test_templates_that_read_only_their_deps_and_any_with_of_a_code_tool_pass() -> None:
    workflow = parse_workflow(
        spec(
            [
                {"id": "customer", "tool": "crm.lookup", "with": {"anything": [1, 2]}},
                {
                    "id": "route",
                    "tool": "llm.chat",
                    "deps": ["customer"],
                    "with": {
                        "system": "You route tickets for {{ vars.product }}.",
                        "prompt": "{{ input.text }} {{ steps.customer.tier }} "
                        "{% for k, v in steps.items() %}{{ k }}{% endfor %}",
                        "output": {"type": "object", "properties": {"queue": {"enum": ["a"]}}},
                        "model": "gpt-4o-mini",
                        "temperature": 0,
                        "max_tokens": 200,
                    },
                },
            ],
            vars={"product": "Acme Cloud"},
            input={"type": "object", "required": ["text"]},
            tools=[{"name": "crm.lookup", "call": "acme.tools:lookup", "timeout": "10s"}],
        )
    )
    assert workflow.spec.code_tool("crm.lookup") is not None


def test_the_dependency_check_reads_the_template_tree_not_its_text() -> None:
    check_template("{{ 'steps.other' }} {{ input.steps.other }}", deps=())  # no steps read
