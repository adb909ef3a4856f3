"""Workflows of any shape, against a real runner process (``python -m plnt_runner``) and a
real fake LLM server: the prompts a spec brings reach the model rendered, JSON answers are
validated and repaired once, ``spec.input`` is checked before any step, and the spec's own
Python tools are imported at start and called with the step input."""

import asyncio
import os
import re
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from runner_support import workflow_yaml

from plnt_testkit.fake_llm import FakeLLM

ROUTE_OUTPUT = {
    "type": "object",
    "required": ["queue"],
    "properties": {"queue": {"enum": ["billing", "bugs", "sales"]}},
    "additionalProperties": False,
}
TRIAGE_STEPS = [
    {
        "id": "summary",
        "tool": "llm.generate",
        "with": {
            "system": "You summarise support tickets for {{ vars.product }} in one line.",
            "prompt": "Ticket: {{ input.text }}",
        },
    },
    {
        "id": "route",
        "tool": "llm.chat",
        "deps": ["summary"],
        "with": {
            "system": "You route support tickets for {{ vars.product }}.",
            "prompt": "Ticket: {{ input.text }}\nSummary: {{ steps.summary.text }}",
            "model": "gpt-route",
            "temperature": 0,
            "max_tokens": 200,
            "output": ROUTE_OUTPUT,
        },
    },
]
TRIAGE_SPEC = {
    "vars": {"product": "Acme Cloud"},
    "input": {
        "type": "object",
        "required": ["text"],
        "properties": {"text": {"type": "string"}, "tier": {"enum": ["free", "gold"]}},
    },
}
TICKET = {"text": "I was charged twice for my invoice", "tier": "gold"}


def _env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLNT_")}
    env.update({f"PLNT_RUNNER_{k.upper()}": v for k, v in settings.items()})
    return env


@asynccontextmanager
async def runner(
    tmp_path: Path,
    spec: bytes,
    *,
    cwd: Path | None = None,
    command: tuple[str, ...] = ("-m", "plnt_runner"),
    **settings: str,
) -> AsyncIterator[str]:
    """A runner process (``python <command>``) serving ``spec`` on a free port; yields its
    base URL."""
    workflow = tmp_path / "workflow.yaml"
    workflow.write_bytes(spec)
    env = _env(workflow_file=str(workflow), port="0", cache_size="64", **settings)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *command,
        env=env,
        cwd=cwd or tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        line = (await asyncio.wait_for(process.stdout.readline(), timeout=30)).decode()
        if not line:
            raise AssertionError((await process.stderr.read()).decode())
        match = re.fullmatch(r"listening on (http://\S+)\n", line)
        assert match, line
        yield match.group(1)
    finally:
        if process.returncode is None:
            process.terminate()
            await asyncio.wait_for(process.wait(), timeout=20)


async def invoke(url: str, body: Any) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.post(f"{url}/invoke", json=body) as response:
        return response.status, await response.json()


async def start_failure(tmp_path: Path, spec: bytes, *, cwd: Path) -> tuple[int, str]:
    """Exit code and stderr of a runner that must refuse to start."""
    workflow = tmp_path / "refused.yaml"
    workflow.write_bytes(spec)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "plnt_runner",
        env=_env(workflow_file=str(workflow), port="0"),
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode is not None
    return process.returncode, stderr.decode()


async def test_the_model_gets_the_rendered_prompts_and_the_steps_sampling(tmp_path: Path) -> None:
    async with FakeLLM(reply=None) as llm:
        spec = workflow_yaml(TRIAGE_STEPS, name="triage", **TRIAGE_SPEC)
        async with runner(tmp_path, spec, llm_base_url=llm.base_url, llm_model="base") as url:
            status, body = await invoke(url, TICKET)
        assert status == 200, body
        summary, route = list(llm.received)
    assert summary.body["model"] == "base"  # no model on the step: the backend's
    assert "temperature" not in summary.body
    assert summary.system == "You summarise support tickets for Acme Cloud in one line."
    assert summary.user == "Ticket: I was charged twice for my invoice"

    summary_text = body["steps"]["summary"]["output"]["text"]
    assert summary_text.startswith("fake reply to: Ticket: I was charged twice")
    assert route.user == f"Ticket: I was charged twice for my invoice\nSummary: {summary_text}"
    assert route.system.startswith("You route support tickets for Acme Cloud.")
    assert (route.body["model"], route.body["temperature"], route.body["max_tokens"]) == (
        "gpt-route",
        0,
        200,
    )
    assert "response_format" not in route.body  # no structured outputs: asked in words
    for request in (summary, route):  # nothing of the example's use case leaks in
        sent = request.text.lower().replace("fake reply to", "")
        for word in ("review", "brand", "voice", "reply", "replies", "customer"):
            assert not re.search(rf"\b{word}\b", sent), (word, sent)


async def test_a_schema_valid_answer_is_the_steps_output_as_it_is(tmp_path: Path) -> None:
    async with FakeLLM() as llm:
        spec = workflow_yaml(TRIAGE_STEPS, name="triage", **TRIAGE_SPEC)
        async with runner(
            tmp_path, spec, llm_base_url=llm.base_url, llm_structured_outputs="true"
        ) as url:
            status, body = await invoke(url, TICKET)
        route = list(llm.received)[-1]
    assert status == 200, body
    assert body["steps"]["route"]["output"] == {"queue": "billing"}
    assert body["output"]["route"] == {"queue": "billing"}
    assert route.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "route", "schema": ROUTE_OUTPUT, "strict": True},
    }
    assert "JSON Schema" not in route.system
    assert llm.request_count == 2


async def test_an_invalid_answer_is_asked_once_more_with_the_error(tmp_path: Path) -> None:
    async with FakeLLM(invalid_answers=1) as llm:
        spec = workflow_yaml(TRIAGE_STEPS, name="triage", **TRIAGE_SPEC)
        async with runner(tmp_path, spec, llm_base_url=llm.base_url) as url:
            status, body = await invoke(url, TICKET)
        requests = list(llm.received)
    assert status == 200, body
    assert body["steps"]["route"]["output"] == {"queue": "billing"}
    assert len(requests) == 3
    repair = requests[2].messages
    assert repair[-2]["role"] == "assistant"
    assert repair[-2]["content"] == '{"queue": "not-one-of-them"}'
    assert repair[-1]["role"] == "user"
    assert "at $.queue: 'not-one-of-them' is not one of" in repair[-1]["content"]


async def test_twice_invalid_fails_the_call_naming_the_step_and_the_path(tmp_path: Path) -> None:
    async with FakeLLM(invalid_answers=2) as llm:
        spec = workflow_yaml(TRIAGE_STEPS, name="triage", **TRIAGE_SPEC)
        async with runner(tmp_path, spec, llm_base_url=llm.base_url) as url:
            status, body = await invoke(url, TICKET)
        assert llm.request_count == 3
    assert status == 500
    assert body["step"] == "route"
    assert "step 'route' (llm.chat) failed" in body["error"]
    assert (
        "at $.queue: 'not-one-of-them' is not one of ['billing', 'bugs', 'sales']"
        in (body["error"])
    )


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"tier": "gold"}, "at $: 'text' is a required property"),
        ({"text": "x", "tier": "platinum"}, "at $.tier: 'platinum' is not one of"),
        ({"text": 7}, "at $.text: 7 is not of type 'string'"),
    ],
    ids=["missing-field", "not-in-enum", "wrong-type"],
)
async def test_a_body_that_does_not_match_spec_input_is_422_and_costs_no_llm_call(
    tmp_path: Path, body: dict[str, Any], path: str
) -> None:
    async with FakeLLM() as llm:
        spec = workflow_yaml(TRIAGE_STEPS, name="triage", **TRIAGE_SPEC)
        async with runner(tmp_path, spec, llm_base_url=llm.base_url) as url:
            status, answer = await invoke(url, body)
            ok, _ = await invoke(url, TICKET)  # the same runner serves a matching body
        assert llm.request_count == 2
    assert status == 422
    assert answer["reason"] == "InputInvalid"
    assert path in answer["error"]
    assert ok == 200


TOOLS_MODULE = textwrap.dedent(
    """
    import asyncio
    import time

    SENT = {"count": 0}
    COMPUTED = {"count": 0}


    def lookup(step):
        return {"tier": "gold", "seen": step}


    async def score(step):
        await asyncio.sleep(0)
        return {"score": len(step["steps"]["customer"]["tier"]), "with": step["with"]}


    def explode(step):
        raise ValueError("no such customer: " + step["input"]["text"])


    def slow(step):
        time.sleep(3)
        return {}


    def notify(step):
        SENT["count"] += 1
        return {"sent": SENT["count"]}


    def pure(step):
        COMPUTED["count"] += 1
        return {"computed": COMPUTED["count"]}
    """
)
CODE_TOOLS = [
    {"name": "crm.lookup", "call": "acme_tools.crm:lookup"},
    {"name": "crm.score", "call": "acme_tools.crm:score"},
    {"name": "crm.explode", "call": "acme_tools.crm:explode"},
    {"name": "crm.slow", "call": "acme_tools.crm:slow", "timeout": "200ms"},
    {"name": "crm.notify", "call": "acme_tools.crm:notify", "sideEffects": True},
    {"name": "crm.pure", "call": "acme_tools.crm:pure"},
]


def code_root(tmp_path: Path) -> Path:
    """A directory holding the package ``acme_tools``, as an unpacked code archive would."""
    root = tmp_path / "code"
    (root / "acme_tools").mkdir(parents=True)
    (root / "acme_tools" / "__init__.py").write_text("")
    (root / "acme_tools" / "crm.py").write_text(TOOLS_MODULE)
    return root


def code_spec(steps: list[dict[str, Any]]) -> bytes:
    return workflow_yaml(steps, name="code-flow", tools=CODE_TOOLS)


async def test_sync_and_async_code_tools_get_the_step_input(tmp_path: Path) -> None:
    steps = [
        {"id": "customer", "tool": "crm.lookup", "with": {"fields": ["tier"]}},
        {"id": "rank", "tool": "crm.score", "deps": ["customer"], "with": {"scale": 10}},
    ]
    async with runner(tmp_path, code_spec(steps), cwd=code_root(tmp_path)) as url:
        status, body = await invoke(url, {"text": "hello"})
    assert status == 200, body
    assert body["steps"]["customer"]["output"] == {
        "tier": "gold",
        "seen": {"input": {"text": "hello"}, "steps": {}, "with": {"fields": ["tier"]}},
    }
    assert body["steps"]["rank"]["output"] == {"score": 4, "with": {"scale": 10}}


async def test_a_raising_code_tool_fails_the_step_with_type_and_message_only(
    tmp_path: Path,
) -> None:
    steps = [{"id": "boom", "tool": "crm.explode"}]
    async with runner(tmp_path, code_spec(steps), cwd=code_root(tmp_path)) as url:
        status, body = await invoke(url, {"text": "ann"})
    assert status == 500
    assert body["step"] == "boom"
    assert body["error"] == "step 'boom' (crm.explode) failed: ValueError: no such customer: ann"
    assert "Traceback" not in str(body)


async def test_a_code_tool_past_its_timeout_fails_the_step_as_timed_out(tmp_path: Path) -> None:
    steps = [{"id": "wait", "tool": "crm.slow"}]
    async with runner(tmp_path, code_spec(steps), cwd=code_root(tmp_path)) as url:
        started = asyncio.get_running_loop().time()
        status, body = await invoke(url, {})
        took = asyncio.get_running_loop().time() - started
    assert status == 500
    assert body["error"] == "step 'wait' (crm.slow) failed: timed out after 0.2s"
    assert took < 2


async def test_a_side_effect_tool_runs_on_every_call_a_pure_one_is_cached(tmp_path: Path) -> None:
    steps = [{"id": "ping", "tool": "crm.notify"}, {"id": "calc", "tool": "crm.pure"}]
    async with runner(tmp_path, code_spec(steps), cwd=code_root(tmp_path)) as url:
        outputs = [(await invoke(url, {"same": 1}))[1]["steps"] for _ in range(3)]
    assert [o["ping"]["output"]["sent"] for o in outputs] == [1, 2, 3]
    assert [o["ping"]["cached"] for o in outputs] == [False, False, False]
    assert [o["calc"]["output"] for o in outputs] == [{"computed": 1}] * 3
    assert [o["calc"]["cached"] for o in outputs] == [False, True, True]


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        ("acme_tools.nowhere:lookup", "call 'acme_tools.nowhere:lookup': no module named"),
        ("acme_tools.crm:missing", "module 'acme_tools.crm' has no 'missing'"),
    ],
    ids=["missing-module", "missing-function"],
)
async def test_a_code_tool_that_cannot_be_imported_stops_the_runner_at_start(
    tmp_path: Path, call: str, problem: str
) -> None:
    spec = workflow_yaml(
        [{"id": "customer", "tool": "crm.lookup"}],
        tools=[{"name": "crm.lookup", "call": call}],
    )
    code, stderr = await start_failure(tmp_path, spec, cwd=code_root(tmp_path))
    assert code == 1
    lines = [line for line in stderr.splitlines() if line.startswith("plnt runner:")]
    assert len(lines) == 1, stderr
    assert "tool 'crm.lookup'" in lines[0]
    assert problem in lines[0]


async def test_an_images_own_main_can_set_up_and_then_serve(tmp_path: Path) -> None:
    """``plnt_runner.serve()`` is the runner as a library call: set-up first, then serve."""
    code = code_root(tmp_path)
    main = tmp_path / "image_main.py"
    main.write_text(
        textwrap.dedent(
            f"""
            import sys

            sys.path.insert(0, {str(code)!r})  # the image's own set-up: where its code is

            import acme_tools.crm
            import plnt_runner

            acme_tools.crm.SENT["count"] = 100
            plnt_runner.serve()
            """
        )
    )
    steps = [{"id": "ping", "tool": "crm.notify"}]
    async with runner(tmp_path, code_spec(steps), command=(str(main),)) as url:
        status, body = await invoke(url, {})
    assert status == 200, body
    assert body["steps"]["ping"]["output"] == {"sent": 101}
