"""The tools a workflow step can name, built over the ``LLMProvider`` and ``HttpPoster`` ports.

A tool turns one step input ``{"input": body, "steps": {dep: output}, "with": config}`` into
a JSON-able output. The LLM-backed tools have no side effects and are cacheable;
``http.request`` has side effects and never is. Which step runs when, caching and timeouts
belong to the executor, not here.
"""

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from plnt_runner.errors import ToolFailed
from plnt_runner.ports import HttpPoster, LLMProvider
from plnt_runner.prompts import (
    Task,
    brand_voice_hint,
    build_messages,
    extract_json_object,
    message_text,
)
from plnt_runner.retrieval import retrieve
from plnt_runner.usage import TokenUsage

StepInput = Mapping[str, Any]
"""``{"input": <request body>, "steps": {dep_id: dep_output}, "with": <step config>}``."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool knows about the step it runs for."""

    step_id: str
    emit_token: Callable[[str], None] | None = None
    """Set when the caller streams: LLM tools that produce text pass each delta to it."""
    usage: TokenUsage = field(default_factory=TokenUsage)
    """Where the step's LLM calls add the tokens they spent."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A named tool: how to run it, and whether its outputs may be cached."""

    name: str
    run: Callable[[StepInput, ToolContext], Awaitable[Any]]
    cacheable: bool


def build_tools(*, llm: LLMProvider, http: HttpPoster) -> dict[str, Tool]:
    """The tool registry for one runner: every name in ``KNOWN_TOOLS``."""
    llm_tools = _LLMTools(llm)
    return {
        "llm.classify": Tool(name="llm.classify", run=llm_tools.classify, cacheable=True),
        "rag.query": Tool(name="rag.query", run=llm_tools.brand_voice, cacheable=True),
        "llm.generate": Tool(name="llm.generate", run=llm_tools.draft, cacheable=True),
        "policy.moderate": Tool(name="policy.moderate", run=llm_tools.moderate, cacheable=True),
        # Side effects: a cached POST would silently not happen, so never cache it.
        "http.request": Tool(name="http.request", run=_HttpTool(http).run, cacheable=False),
    }


class _LLMTools:
    """The four tools that ask the LLM, each output labelled with the provider's name."""

    def __init__(self, llm: LLMProvider) -> None:
        self._llm = llm

    async def classify(self, step: StepInput, ctx: ToolContext) -> dict[str, Any]:
        payload: dict[str, Any] = {"message": message_text(step["input"])}
        _copy_strings(step["with"], payload, "instructions")
        reply = await self._llm.complete(
            messages=build_messages(task=Task.CLASSIFY, payload=payload), usage=ctx.usage
        )
        verdict = extract_json_object(reply)
        output: dict[str, Any] = {
            "sentiment": str((verdict or {}).get("sentiment", "unknown")).lower(),
            "topic": str((verdict or {}).get("topic", "")),
            "praise": _strings((verdict or {}).get("praise")),
            "concerns": _strings((verdict or {}).get("concerns")),
            "provider": self._llm.name,
        }
        if verdict is None:  # keep what the model said so a bad prompt can be diagnosed
            output["raw"] = reply
        return output

    async def brand_voice(self, step: StepInput, ctx: ToolContext) -> dict[str, Any]:
        config = step["with"]
        message = message_text(step["input"])
        voice = brand_voice_hint(step["input"]) or str(config.get("brand_voice", ""))
        classification = _first_output_with(step["steps"], "sentiment")
        query = " ".join([message, str((classification or {}).get("topic", ""))])
        documents = config.get("documents", [])
        passages = retrieve(query=query, documents=documents, top_k=int(config.get("top_k", 3)))
        payload: dict[str, Any] = {"message": message, "brand_voice": voice, "passages": passages}
        if classification is not None:
            payload["classification"] = _without_provider(classification)
        reply = await self._llm.complete(
            messages=build_messages(task=Task.BRAND_VOICE, payload=payload), usage=ctx.usage
        )
        output = {"guidance": reply.strip(), "brand_voice": voice, "passages": passages}
        if classification is not None:  # carried forward so the drafting step sees it too
            output["classification"] = payload["classification"]
        return {**output, "provider": self._llm.name}

    async def draft(self, step: StepInput, ctx: ToolContext) -> dict[str, Any]:
        context = {k: _without_provider(v) for k, v in step["steps"].items()}
        payload: dict[str, Any] = {
            "message": message_text(step["input"]),
            "brand_voice": brand_voice_hint(step["input"])
            or str(step["with"].get("brand_voice", "")),
            "context": context,
        }
        _copy_strings(step["with"], payload, "instructions")
        messages = build_messages(task=Task.DRAFT, payload=payload)
        if ctx.emit_token is None:
            text = await self._llm.complete(messages=messages, usage=ctx.usage)
        else:
            parts = []
            async for delta in self._llm.stream(messages=messages, usage=ctx.usage):
                parts.append(delta)
                ctx.emit_token(delta)
            text = "".join(parts)
        if not text.strip():
            raise ToolFailed(f"the LLM ({self._llm.name}) returned an empty draft")
        return {"text": text.strip(), "provider": self._llm.name}

    async def moderate(self, step: StepInput, ctx: ToolContext) -> dict[str, Any]:
        config = step["with"]
        draft_output = _first_output_with(step["steps"], "text")
        draft = str(draft_output["text"]) if draft_output else message_text(step["input"])
        blocked = _strings(config.get("blocked_terms"))
        payload: dict[str, Any] = {"draft": draft, "blocked_terms": blocked}
        _copy_strings(config, payload, "policy")
        reply = await self._llm.complete(
            messages=build_messages(task=Task.MODERATE, payload=payload), usage=ctx.usage
        )
        verdict = extract_json_object(reply) or {}
        allowed = verdict.get("allowed")
        reasons = _strings(verdict.get("reasons"))
        if not isinstance(allowed, bool):  # fail closed: an unreadable verdict is a refusal
            allowed, reasons = False, [f"moderation verdict unreadable: {reply[:200]!r}"]
        # Blocked terms are enforced here too, whatever the model said about them.
        hits = sorted({t for t in blocked if t.lower() in draft.lower()})
        if hits:
            allowed = False
            reasons = [*reasons, f"contains blocked terms: {', '.join(hits)}"]
        return {"allowed": allowed, "reasons": reasons, "provider": self._llm.name}


class _HttpTool:
    """``http.request``: POST the step input as JSON to ``with.url``, return the body."""

    def __init__(self, http: HttpPoster) -> None:
        self._http = http

    async def run(self, step: StepInput, ctx: ToolContext) -> Any:
        return await self._http.post_json(url=str(step["with"]["url"]), payload=step)


def _first_output_with(outputs: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    """The first dependency output (in ``deps`` order) that is an object holding ``key``."""
    for output in outputs.values():
        if isinstance(output, Mapping) and isinstance(output.get(key), str):
            return output
    return None


def _without_provider(output: Any) -> Any:
    """An output minus its provider label, which says nothing to the model."""
    if isinstance(output, Mapping):
        return {k: v for k, v in output.items() if k != "provider"}
    return output


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _copy_strings(source: Mapping[str, Any], target: dict[str, Any], *keys: str) -> None:
    for key in keys:
        if isinstance(source.get(key), str):
            target[key] = source[key]
