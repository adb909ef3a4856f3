"""The built-in tools over a scripted model: templates, generic instructions, structured
output with its one repair request, failing closed, streaming, and the spec checks of
``with``."""

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from runner_support import make_workflow

from plnt_common.errors import SpecInvalid
from plnt_runner.errors import OutputInvalid, ToolFailed
from plnt_runner.ports import DEFAULT_OPTIONS, CallOptions, Message
from plnt_runner.tools import ToolContext, build_tools
from plnt_runner.usage import TokenUsage


class ScriptedLLM:
    """An ``LLMProvider`` giving its answers in turn (the last one again when they run out),
    recording the messages and options of every call."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[list[Message], CallOptions]] = []

    @property
    def name(self) -> str:
        return "scripted"

    def _next(self, messages: Sequence[Message], options: CallOptions) -> str:
        self.calls.append((list(messages), options))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def complete(
        self,
        *,
        messages: Sequence[Message],
        usage: TokenUsage,
        options: CallOptions = DEFAULT_OPTIONS,
    ) -> str:
        return self._next(messages, options)

    async def stream(
        self,
        *,
        messages: Sequence[Message],
        usage: TokenUsage,
        options: CallOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[str]:
        for word in self._next(messages, options).split(" "):
            yield word + " "

    def sent(self, call: int = 0) -> str:
        """Every message text of one call, joined."""
        return "\n".join(m["content"] for m in self.calls[call][0])


class NoHttp:
    async def post_json(self, *, url: str, payload: Any) -> Any:
        raise AssertionError("no HTTP expected")


def step_input(
    body: dict[str, Any], deps: dict[str, Any] | None = None, **config: Any
) -> dict[str, Any]:
    return {"input": body, "steps": deps or {}, "with": config}


CTX = ToolContext("s")
QUEUE = {
    "type": "object",
    "required": ["queue"],
    "properties": {"queue": {"enum": ["billing", "bugs", "sales"]}},
}


async def test_templates_render_input_deps_and_vars_and_sampling_is_the_steps() -> None:
    llm = ScriptedLLM("routed")
    tools = build_tools(llm=llm, http=NoHttp(), vars={"product": "Acme Cloud"})
    output = await tools["llm.chat"].run(
        step_input(
            {"text": "I was charged twice"},
            {"customer": {"tier": "gold"}},
            system="You route tickets for {{ vars.product }}.",
            prompt="Ticket: {{ input.text }}\nTier: {{ steps.customer.tier }}",
            model="gpt-x",
            temperature=0.2,
            max_tokens=50,
        ),
        CTX,
    )
    assert output == {"text": "routed", "provider": "scripted"}
    messages, options = llm.calls[0]
    assert messages == [
        {"role": "system", "content": "You route tickets for Acme Cloud."},
        {"role": "user", "content": "Ticket: I was charged twice\nTier: gold"},
    ]
    assert (options.model, options.temperature, options.max_tokens) == ("gpt-x", 0.2, 50)


async def test_an_undefined_name_fails_the_step_naming_the_template_key() -> None:
    tools = build_tools(llm=ScriptedLLM("x"), http=NoHttp())
    with pytest.raises(ToolFailed, match=r"with.prompt could not be rendered: .*'nope'"):
        await tools["llm.chat"].run(step_input({}, prompt="{{ input.nope }}"), CTX)


async def test_the_sandbox_refuses_python_internals() -> None:
    tools = build_tools(llm=ScriptedLLM("x"), http=NoHttp())
    with pytest.raises(ToolFailed, match="could not be rendered"):
        await tools["llm.chat"].run(
            step_input({}, prompt="{{ ''.__class__.__mro__[1].__subclasses__() }}"), CTX
        )


@pytest.mark.parametrize(
    ("tool", "answer"),
    [
        ("llm.chat", "ok"),
        ("llm.classify", '{"label": "positive"}'),
        ("llm.generate", "ok"),
        ("policy.moderate", '{"allowed": true, "reasons": []}'),
        ("rag.query", "ok"),
    ],
    ids=["chat", "classify", "generate", "moderate", "rag"],
)
async def test_without_templates_the_instructions_are_generic(tool: str, answer: str) -> None:
    llm = ScriptedLLM(answer)
    tools = build_tools(llm=llm, http=NoHttp())
    await tools[tool].run(step_input({"text": "The app is great"}), CTX)
    assert len(llm.calls) == 1  # the answer was taken: no repair request
    sent = llm.sent().lower()
    assert "the app is great" in sent
    for word in ("review", "brand", "voice", "reply", "customer"):
        assert word not in sent, (word, sent)


async def test_a_schema_valid_answer_is_the_output_as_it_is() -> None:
    llm = ScriptedLLM('{"queue": "bugs"}')
    tools = build_tools(llm=llm, http=NoHttp())
    output = await tools["llm.chat"].run(step_input({"text": "crash"}, output=QUEUE), CTX)
    assert output == {"queue": "bugs"}
    assert len(llm.calls) == 1
    assert '"enum": ["billing", "bugs", "sales"]' in llm.sent()  # asked in the instructions
    assert llm.calls[0][1].schema is None


async def test_structured_outputs_send_the_schema_as_response_format_not_as_words() -> None:
    llm = ScriptedLLM('{"queue": "sales"}')
    tools = build_tools(llm=llm, http=NoHttp(), structured_outputs=True)
    await tools["llm.chat"].run(step_input({}, output=QUEUE), ToolContext("route"))
    options = llm.calls[0][1]
    assert options.schema == QUEUE
    assert options.schema_name == "route"
    assert "JSON Schema" not in llm.sent()


async def test_an_invalid_answer_is_asked_once_more_quoting_the_error() -> None:
    llm = ScriptedLLM('{"queue": "refunds"}', 'Here: {"queue": "billing"}')
    tools = build_tools(llm=llm, http=NoHttp())
    output = await tools["llm.chat"].run(step_input({}, output=QUEUE), CTX)
    assert output == {"queue": "billing"}
    repair = llm.calls[1][0]
    assert repair[-2] == {"role": "assistant", "content": '{"queue": "refunds"}'}
    assert "at $.queue: 'refunds' is not one of" in repair[-1]["content"]


async def test_twice_invalid_fails_naming_the_json_path() -> None:
    llm = ScriptedLLM('{"queue": 3}')
    tools = build_tools(llm=llm, http=NoHttp())
    with pytest.raises(OutputInvalid, match=r"twice: at \$\.queue: 3 is not one of"):
        await tools["llm.chat"].run(step_input({}, output=QUEUE), CTX)
    assert len(llm.calls) == 2


async def test_classify_answers_one_of_the_labels() -> None:
    llm = ScriptedLLM('```json\n{"label": "bugs"}\n```')
    tools = build_tools(llm=llm, http=NoHttp())
    output = await tools["llm.classify"].run(
        step_input({"text": "it crashes"}, labels=["billing", "bugs"]), CTX
    )
    assert output == {"label": "bugs"}
    assert '"billing", "bugs"' in llm.sent()


async def test_classify_refuses_a_label_it_was_not_given() -> None:
    tools = build_tools(llm=ScriptedLLM('{"label": "other"}'), http=NoHttp())
    with pytest.raises(OutputInvalid, match=r"\$\.label"):
        await tools["llm.classify"].run(step_input({}, labels=["a", "b"]), CTX)


async def test_moderation_fails_closed_on_an_unreadable_verdict() -> None:
    tools = build_tools(llm=ScriptedLLM("looks fine to me"), http=NoHttp())
    output = await tools["policy.moderate"].run(step_input({}, {"draft": {"text": "Thanks!"}}), CTX)
    assert output["allowed"] is False
    assert output["reasons"][0].startswith("moderation verdict unreadable")


async def test_moderation_sends_its_rules_and_enforces_blocked_terms_whatever_the_model_says() -> (
    None
):
    llm = ScriptedLLM('{"allowed": true, "reasons": []}')
    tools = build_tools(llm=llm, http=NoHttp())
    output = await tools["policy.moderate"].run(
        step_input(
            {},
            {"draft": {"text": "Try our Competitor instead"}},
            rules=["no talk of prices"],
            blocked_terms=["competitor"],
        ),
        CTX,
    )
    assert output == {
        "allowed": False,
        "reasons": ["contains blocked terms: competitor"],
        "provider": "scripted",
    }
    messages = llm.calls[0][0]
    assert "- no talk of prices" in messages[0]["content"]
    assert messages[-1]["content"] == "Try our Competitor instead"


async def test_generate_streams_deltas_when_asked_and_returns_the_whole_text() -> None:
    tools = build_tools(llm=ScriptedLLM("Thank you kindly"), http=NoHttp())
    deltas: list[str] = []
    output = await tools["llm.generate"].run(
        step_input({"text": "Nice"}, {"voice": {"guidance": "be brief", "provider": "x"}}),
        ToolContext("draft", deltas.append),
    )
    assert deltas == ["Thank ", "you ", "kindly "]
    assert output == {"text": "Thank you kindly", "provider": "scripted"}


async def test_generate_passes_dependency_outputs_without_provider_labels() -> None:
    llm = ScriptedLLM("ok")
    tools = build_tools(llm=llm, http=NoHttp())
    await tools["llm.generate"].run(
        step_input({"text": "Nice"}, {"voice": {"guidance": "g", "provider": "x"}}), CTX
    )
    assert json.loads(llm.calls[0][0][-1]["content"]) == {
        "input": {"text": "Nice"},
        "steps": {"voice": {"guidance": "g"}},
    }


async def test_generate_refuses_an_empty_text() -> None:
    tools = build_tools(llm=ScriptedLLM("   "), http=NoHttp())
    with pytest.raises(ToolFailed, match="empty text"):
        await tools["llm.generate"].run(step_input({"text": "x"}), CTX)


async def test_rag_retrieves_matching_documents_for_its_query_template() -> None:
    llm = ScriptedLLM("Use the garage.")
    tools = build_tools(llm=llm, http=NoHttp())
    documents = [
        "Parking: free garage on 5th street.",
        "Opening hours: 9 to 5.",
        "Parking validation at the desk.",
    ]
    output = await tools["rag.query"].run(
        step_input(
            {"question": "Where is parking?"},
            documents=documents,
            top_k=2,
            query="{{ input.question }}",
            prompt="{{ passages | join(' | ') }}",
        ),
        CTX,
    )
    assert output["passages"] == [
        "Parking: free garage on 5th street.",
        "Parking validation at the desk.",
    ]
    assert output["guidance"] == "Use the garage."
    assert llm.calls[0][0][-1]["content"] == (
        "Parking: free garage on 5th street. | Parking validation at the desk."
    )


@pytest.mark.parametrize(
    ("step", "problem"),
    [
        ({"id": "hook", "tool": "http.request"}, "'hook' (http.request) needs with.url"),
        ({"id": "hook", "tool": "http.request", "with": {"url": "ftp://x"}}, "needs with.url"),
        ({"id": "kb", "tool": "rag.query", "with": {"documents": "one"}}, "with.documents"),
        ({"id": "kb", "tool": "rag.query", "with": {"top_k": -1}}, "with.top_k"),
        ({"id": "mod", "tool": "policy.moderate", "with": {"blocked_terms": [1]}}, "blocked_terms"),
        ({"id": "mod", "tool": "policy.moderate", "with": {"rules": "be nice"}}, "with.rules"),
        ({"id": "c", "tool": "llm.classify", "with": {"labels": []}}, "with.labels"),
        ({"id": "c", "tool": "llm.classify", "with": {"labels": ["a", "a"]}}, "with.labels"),
        ({"id": "g", "tool": "llm.generate", "with": {"temperature": 3}}, "with.temperature"),
        ({"id": "g", "tool": "llm.generate", "with": {"max_tokens": 0}}, "with.max_tokens"),
        ({"id": "g", "tool": "llm.generate", "with": {"model": 4}}, "with.model"),
        ({"id": "g", "tool": "llm.generate", "with": {"prompt": 4}}, "with.prompt must be a text"),
    ],
    ids=[
        "no-url",
        "not-http",
        "documents-not-list",
        "negative-top-k",
        "terms-not-text",
        "rules-not-a-list",
        "no-labels",
        "duplicate-labels",
        "hot-temperature",
        "no-tokens",
        "model-not-text",
        "prompt-not-text",
    ],
)
def test_a_spec_with_unusable_tool_config_is_refused_naming_the_step(
    step: dict[str, Any], problem: str
) -> None:
    with pytest.raises(SpecInvalid, match=problem.replace("(", r"\(").replace(")", r"\)")):
        make_workflow([step])
