"""The LLM-backed tools over a scripted model: parsing, failing closed, streaming, config."""

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from runner_support import make_workflow

from plnt_common.errors import SpecInvalid
from plnt_runner.errors import ToolFailed
from plnt_runner.ports import Message
from plnt_runner.prompts import Task, read_messages
from plnt_runner.tools import ToolContext, build_tools
from plnt_runner.usage import TokenUsage


class ScriptedLLM:
    """An ``LLMProvider`` answering a fixed text, recording what it was asked."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.asked: list[tuple[Task | None, dict[str, Any]]] = []

    @property
    def name(self) -> str:
        return "scripted"

    async def complete(self, *, messages: Sequence[Message], usage: TokenUsage) -> str:
        self.asked.append(read_messages(messages))
        return self.reply

    async def stream(self, *, messages: Sequence[Message], usage: TokenUsage) -> AsyncIterator[str]:
        self.asked.append(read_messages(messages))
        for word in self.reply.split(" "):
            yield word + " "


class NoHttp:
    async def post_json(self, *, url: str, payload: Any) -> Any:
        raise AssertionError("no HTTP expected")


def step_input(
    body: dict[str, Any], deps: dict[str, Any] | None = None, **config: Any
) -> dict[str, Any]:
    return {"input": body, "steps": deps or {}, "with": config}


CTX = ToolContext("s")


async def test_classify_parses_json_even_wrapped_in_prose() -> None:
    llm = ScriptedLLM('Sure! ```json\n{"sentiment": "Negative", "topic": "wait time"}\n```')
    tools = build_tools(llm=llm, http=NoHttp())
    output = await tools["llm.classify"].run(step_input({"review": "Slow"}), CTX)
    assert output == {
        "sentiment": "negative",
        "topic": "wait time",
        "praise": [],
        "concerns": [],
        "provider": "scripted",
    }
    assert llm.asked == [(Task.CLASSIFY, {"message": "Slow"})]


async def test_classify_keeps_an_unreadable_answer_for_diagnosis() -> None:
    tools = build_tools(llm=ScriptedLLM("I think it is positive"), http=NoHttp())
    output = await tools["llm.classify"].run(step_input({"text": "hi"}), CTX)
    assert output["sentiment"] == "unknown"
    assert output["raw"] == "I think it is positive"


async def test_moderation_fails_closed_on_an_unreadable_verdict() -> None:
    tools = build_tools(llm=ScriptedLLM("looks fine to me"), http=NoHttp())
    output = await tools["policy.moderate"].run(step_input({}, {"draft": {"text": "Thanks!"}}), CTX)
    assert output["allowed"] is False
    assert output["reasons"][0].startswith("moderation verdict unreadable")


async def test_moderation_enforces_blocked_terms_whatever_the_model_says() -> None:
    llm = ScriptedLLM('{"allowed": true, "reasons": []}')
    tools = build_tools(llm=llm, http=NoHttp())
    output = await tools["policy.moderate"].run(
        step_input(
            {}, {"draft": {"text": "Try our Competitor instead"}}, blocked_terms=["competitor"]
        ),
        CTX,
    )
    assert output == {
        "allowed": False,
        "reasons": ["contains blocked terms: competitor"],
        "provider": "scripted",
    }
    assert llm.asked[0][1]["draft"] == "Try our Competitor instead"


async def test_generate_streams_deltas_when_asked_and_returns_the_whole_text() -> None:
    tools = build_tools(llm=ScriptedLLM("Thank you kindly"), http=NoHttp())
    deltas: list[str] = []
    output = await tools["llm.generate"].run(
        step_input({"review": "Nice"}, {"voice": {"guidance": "be brief", "provider": "x"}}),
        ToolContext("draft", deltas.append),
    )
    assert deltas == ["Thank ", "you ", "kindly "]
    assert output == {"text": "Thank you kindly", "provider": "scripted"}


async def test_generate_passes_dependency_outputs_as_context_without_provider_labels() -> None:
    llm = ScriptedLLM("ok")
    tools = build_tools(llm=llm, http=NoHttp())
    await tools["llm.generate"].run(
        step_input(
            {"review": "Nice", "brand_voice": "dry"}, {"voice": {"guidance": "g", "provider": "x"}}
        ),
        CTX,
    )
    task, payload = llm.asked[0]
    assert task is Task.DRAFT
    assert payload == {
        "message": "Nice",
        "brand_voice": "dry",
        "context": {"voice": {"guidance": "g"}},
    }


async def test_generate_refuses_an_empty_draft() -> None:
    tools = build_tools(llm=ScriptedLLM("   "), http=NoHttp())
    with pytest.raises(ToolFailed, match="empty draft"):
        await tools["llm.generate"].run(step_input({"review": "x"}), CTX)


async def test_rag_retrieves_matching_documents_from_with() -> None:
    llm = ScriptedLLM("Be warm.")
    tools = build_tools(llm=llm, http=NoHttp())
    documents = [
        "Parking: free garage on 5th street.",
        "Opening hours: 9 to 5.",
        "Parking validation at the desk.",
    ]
    output = await tools["rag.query"].run(
        step_input(
            {"review": "Where is parking?"}, documents=documents, top_k=2, brand_voice="calm"
        ),
        CTX,
    )
    assert output["passages"] == [
        "Parking: free garage on 5th street.",
        "Parking validation at the desk.",
    ]
    assert output["guidance"] == "Be warm."
    assert output["brand_voice"] == "calm"


@pytest.mark.parametrize(
    ("step", "problem"),
    [
        ({"id": "hook", "tool": "http.request"}, "'hook' (http.request) needs with.url"),
        ({"id": "hook", "tool": "http.request", "with": {"url": "ftp://x"}}, "needs with.url"),
        ({"id": "kb", "tool": "rag.query", "with": {"documents": "one"}}, "with.documents"),
        ({"id": "kb", "tool": "rag.query", "with": {"top_k": -1}}, "with.top_k"),
        ({"id": "mod", "tool": "policy.moderate", "with": {"blocked_terms": [1]}}, "blocked_terms"),
    ],
    ids=["no-url", "not-http", "documents-not-list", "negative-top-k", "terms-not-text"],
)
def test_a_spec_with_unusable_tool_config_is_refused_naming_the_step(
    step: dict[str, Any], problem: str
) -> None:
    with pytest.raises(SpecInvalid, match=problem.replace("(", r"\(").replace(")", r"\)")):
        make_workflow([step])
