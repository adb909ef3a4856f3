"""The built-in tools a workflow step can name, built over the ``LLMProvider`` and
``HttpPoster`` ports.

A tool turns one step input ``{"input": body, "steps": {dep: output}, "with": config}`` into
a JSON-able output. The LLM tools render the step's ``system`` and ``prompt`` templates
(``plnt_common.templating``: input, steps, vars) or, without them, send generic instructions
(``plnt_runner.prompts``); a step that asks for JSON (``llm.chat``'s ``output``, and
``llm.classify`` and ``policy.moderate`` by construction) gets its answer validated against
the JSON Schema, asked once more quoting the error, and otherwise fails naming the JSON path.
The LLM tools have no side effects and are cacheable; ``http.request`` has side effects: it
is never cached, and in a shadow call it sends nothing and answers ``HTTP_DRY_RUN``. Which
step runs when, caching, timeouts and the shadow dry run belong to the executor, not here;
the workflow's own code tools are in ``plnt_runner.code_tools``.
"""

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jinja2.environment import Template
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from plnt_common.templating import RenderFailed, compile_template, render
from plnt_common.workflow import DEFAULT_LABELS
from plnt_runner import prompts
from plnt_runner.errors import OutputInvalid, ToolFailed
from plnt_runner.ports import CallOptions, HttpPoster, LLMProvider, Message
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
    """A named tool: how to run it, whether its outputs may be cached, and whether it acts on
    the world (then never cached, and not run in a shadow call: ``dry_run`` answers)."""

    name: str
    run: Callable[[StepInput, ToolContext], Awaitable[Any]]
    cacheable: bool
    side_effects: bool = False
    dry_run: Any = None
    """The step's output in a shadow call, instead of running a side-effect tool."""


HTTP_DRY_RUN = {"status": 0, "dryRun": True}
"""What ``http.request`` answers in a shadow call, where it sends nothing."""


def build_tools(
    *,
    llm: LLMProvider,
    http: HttpPoster,
    vars: Mapping[str, Any] | None = None,
    structured_outputs: bool = False,
) -> dict[str, Tool]:
    """The built-in tools for one runner: every name in ``KNOWN_TOOLS``.

    ``vars`` is what templates read as ``vars``; ``structured_outputs`` sends JSON Schemas as
    OpenAI ``response_format`` (the backend's ``llm.structuredOutputs``) instead of asking
    for them in the system message.
    """
    llm_tools = _LLMTools(llm, vars=dict(vars or {}), structured_outputs=structured_outputs)
    return {
        "llm.chat": Tool(name="llm.chat", run=llm_tools.chat, cacheable=True),
        "llm.classify": Tool(name="llm.classify", run=llm_tools.classify, cacheable=True),
        "rag.query": Tool(name="rag.query", run=llm_tools.retrieve, cacheable=True),
        "llm.generate": Tool(name="llm.generate", run=llm_tools.generate, cacheable=True),
        "policy.moderate": Tool(name="policy.moderate", run=llm_tools.moderate, cacheable=True),
        # Side effects: a cached POST would silently not happen, so never cache it.
        "http.request": Tool(
            name="http.request",
            run=_HttpTool(http).run,
            cacheable=False,
            side_effects=True,
            dry_run=HTTP_DRY_RUN,
        ),
    }


class _LLMTools:
    """The five tools that ask the LLM."""

    def __init__(self, llm: LLMProvider, *, vars: dict[str, Any], structured_outputs: bool) -> None:
        self._llm = llm
        self._vars = vars
        self._structured = structured_outputs
        # Compiled once per distinct text: a spec holds a bounded number of them.
        self._templates: dict[str, Template] = {}
        self._validators: dict[str, Draft202012Validator] = {}

    async def chat(self, step: StepInput, ctx: ToolContext) -> Any:
        system = self._render(step, "system", prompts.CHAT)
        user = self._render(step, "prompt", None)
        schema = step["with"].get("output")
        if schema is not None:
            return await self._json(step, ctx, system=system, user=user, schema=schema)
        text = await self._text(step, ctx, prompts.messages(system, user))
        return {"text": text.strip(), "provider": self._llm.name}

    async def classify(self, step: StepInput, ctx: ToolContext) -> dict[str, Any]:
        labels = step["with"].get("labels") or list(DEFAULT_LABELS)
        system = self._render(step, "system", prompts.classify_instructions(labels))
        user = self._render(step, "prompt", None)
        schema = prompts.label_schema(labels)
        verdict = await self._json(step, ctx, system=system, user=user, schema=schema)
        return {"label": verdict["label"]}

    async def retrieve(self, step: StepInput, ctx: ToolContext) -> dict[str, Any]:
        config = step["with"]
        query = self._render(step, "query", prompts.text_of(step["input"], step["steps"]))
        documents = config.get("documents", [])
        passages = retrieve(query=query, documents=documents, top_k=int(config.get("top_k", 3)))
        default_user = json.dumps(
            {"request": query, "passages": passages}, ensure_ascii=False, sort_keys=True
        )
        system = self._render(step, "system", prompts.RETRIEVE, passages=passages)
        user = self._render(step, "prompt", default_user, passages=passages)
        answer = await self._llm.complete(
            messages=prompts.messages(system, user), usage=ctx.usage, options=_options(step)
        )
        return {"guidance": answer.strip(), "passages": passages, "provider": self._llm.name}

    async def generate(self, step: StepInput, ctx: ToolContext) -> dict[str, Any]:
        system = self._render(step, "system", prompts.GENERATE)
        user = self._render(step, "prompt", None)
        text = await self._text(step, ctx, prompts.messages(system, user))
        if not text.strip():
            raise ToolFailed(f"the LLM ({self._llm.name}) returned an empty text")
        return {"text": text.strip(), "provider": self._llm.name}

    async def moderate(self, step: StepInput, ctx: ToolContext) -> dict[str, Any]:
        config = step["with"]
        rules = [*(config.get("rules") or prompts.DEFAULT_RULES)]
        blocked = [str(t) for t in config.get("blocked_terms", [])]
        if blocked:
            rules.append("none of these terms: " + ", ".join(blocked))
        own = self._render(step, "system", "")
        system = f"{own}\n\n{prompts.moderate_instructions(rules)}".strip()
        text = self._render(step, "prompt", prompts.text_of(step["input"], step["steps"]))
        schema = prompts.MODERATION_SCHEMA
        try:
            verdict = await self._json(step, ctx, system=system, user=text, schema=schema)
            allowed, reasons = bool(verdict["allowed"]), [str(r) for r in verdict["reasons"]]
        except OutputInvalid as exc:  # fail closed: an unreadable verdict is a refusal
            allowed, reasons = False, [f"moderation verdict unreadable: {exc}"]
        # Blocked terms are enforced here too, whatever the model said about them.
        hits = sorted({t for t in blocked if t.lower() in text.lower()})
        if hits:
            allowed = False
            reasons = [*reasons, f"contains blocked terms: {', '.join(hits)}"]
        return {"allowed": allowed, "reasons": reasons, "provider": self._llm.name}

    def _render(self, step: StepInput, key: str, default: str | None, **extra: Any) -> str:
        """The step's ``with[key]`` template rendered, else ``default`` (None: the step's
        material as JSON). Raises ``ToolFailed`` naming the key when rendering fails."""
        source = step["with"].get(key)
        if source is None:
            if default is None:
                return prompts.material(step["input"], step["steps"])
            return default
        template = self._templates.get(source)
        if template is None:
            template = self._templates[source] = compile_template(source)
        context = {"input": step["input"], "steps": step["steps"], "vars": self._vars, **extra}
        try:
            return render(template, context)
        except RenderFailed as exc:
            raise ToolFailed(f"with.{key} could not be rendered: {exc}") from None

    async def _text(self, step: StepInput, ctx: ToolContext, messages: list[Message]) -> str:
        """The model's text, streamed token by token when the caller streams."""
        options = _options(step)
        if ctx.emit_token is None:
            return await self._llm.complete(messages=messages, usage=ctx.usage, options=options)
        parts = []
        async for delta in self._llm.stream(messages=messages, usage=ctx.usage, options=options):
            parts.append(delta)
            ctx.emit_token(delta)
        return "".join(parts)

    async def _json(
        self, step: StepInput, ctx: ToolContext, *, system: str, user: str, schema: Any
    ) -> Any:
        """The model's JSON answer, valid against ``schema``: asked once, then once more
        quoting the validation error; raises ``OutputInvalid`` naming the JSON path."""
        validator = self._validator(schema)
        if self._structured:
            options = _options(step, schema=schema, name=ctx.step_id)
        else:
            options = _options(step)
            system = f"{system}\n\n{prompts.schema_instructions(schema)}".strip()
        messages = prompts.messages(system, user)
        answer = await self._llm.complete(messages=messages, usage=ctx.usage, options=options)
        value, problem = _checked(answer, validator)
        if not problem:
            return value
        messages = [
            *messages,
            {"role": "assistant", "content": answer},
            {"role": "user", "content": prompts.repair_message(problem)},
        ]
        answer = await self._llm.complete(messages=messages, usage=ctx.usage, options=options)
        value, problem = _checked(answer, validator)
        if problem:
            raise OutputInvalid(f"the answer did not match the output schema twice: {problem}")
        return value

    def _validator(self, schema: Any) -> Draft202012Validator:
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        validator = self._validators.get(key)
        if validator is None:
            validator = self._validators[key] = Draft202012Validator(schema)
        return validator


def _options(step: StepInput, *, schema: Any = None, name: str = "output") -> CallOptions:
    config = step["with"]
    temperature = config.get("temperature")
    return CallOptions(
        model=config.get("model"),
        temperature=float(temperature) if temperature is not None else None,
        max_tokens=config.get("max_tokens"),
        schema=schema,
        schema_name=_schema_name(name),
    )


def _schema_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in text)[:64] or "output"


def _checked(answer: str, validator: Draft202012Validator) -> tuple[Any, str]:
    """``(value, "")`` when ``answer`` is JSON matching the schema, else ``(None, problem)``
    with the problem's JSON path (``at $.queue: 'x' is not one of [...]``)."""
    try:
        value = prompts.parse_json(answer)
    except ValueError:
        return None, f"at $: the answer is not JSON ({answer[:120]!r})"
    error = best_match(validator.iter_errors(value))
    if error is None:
        return value, ""
    return None, f"at {json_path(error.absolute_path)}: {error.message}"


def json_path(path: Any) -> str:
    """``$.a[0].b``: where in a JSON document a problem is."""
    text = "$"
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


class _HttpTool:
    """``http.request``: POST the step input as JSON to ``with.url``, return the body."""

    def __init__(self, http: HttpPoster) -> None:
        self._http = http

    async def run(self, step: StepInput, ctx: ToolContext) -> Any:
        return await self._http.post_json(url=str(step["with"]["url"]), payload=step)
