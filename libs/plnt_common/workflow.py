"""The microagents ``Workflow`` spec (microagents.dev/v1) as pulled from a registry.

Valid means: unique step ids, every dep exists, no cycles, known tools, bounded sizes,
``with`` keys its tool knows, templates that parse and read only their step's deps, and
JSON Schemas (``spec.input``, ``with.output``) that are schemas.
``parse_workflow`` is the one entry point from bytes; it raises ``SpecInvalid`` with a
message naming the problem.
"""

import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from packaging.requirements import InvalidRequirement, Requirement
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from plnt_common.errors import SpecInvalid
from plnt_common.names import SEMVER, SHA256_PIN, check_dns_label, duration_seconds
from plnt_common.templating import TEMPLATE_KEYS, TemplateInvalid, check_template

# libyaml's loader parses a spec ~10x faster than the pure-Python one; same safe subset
SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_SPEC_BYTES = 256 * 1024
MAX_STEPS = 64
MAX_DEPS = 32

MAX_TOOLS = 64
MAX_REQUIREMENTS = 64
DEFAULT_ENTRYPOINT = "python -m plnt_runner"
"""The command a runner starts with when the spec names none: plnt's own runner."""

KNOWN_TOOLS = frozenset(
    {"llm.chat", "llm.classify", "rag.query", "llm.generate", "policy.moderate", "http.request"}
)
"""The built-in tools; a step names one of them or one of the spec's own ``tools``."""
LLM_TOOLS = frozenset({"llm.chat", "llm.classify", "rag.query", "llm.generate", "policy.moderate"})
"""The built-in tools that ask the LLM: each takes ``system``, ``prompt``, ``model``,
``temperature`` and ``max_tokens``."""
TOOL_NAME = re.compile(r"^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)+$")
"""A code tool's name: dotted, like ``crm.lookup``."""
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
CALL_TARGET = re.compile(rf"^{_IDENTIFIER}(\.{_IDENTIFIER})*:{_IDENTIFIER}$")
"""Where a code tool lives: ``package.module:function``."""
ARCHIVE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""The code archive's file name beside workflow.yaml: one path segment, no ``..``."""


def _check_http(step_id: str, config: Mapping[str, Any]) -> None:
    url = config.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"step {step_id!r} (http.request) needs with.url, an http(s) URL")


def _check_rag(step_id: str, config: Mapping[str, Any]) -> None:
    documents = config.get("documents", [])
    if not isinstance(documents, list) or not all(isinstance(d, str) for d in documents):
        raise ValueError(f"step {step_id!r} (rag.query): with.documents must be a list of text")
    top_k = config.get("top_k", 3)
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0:
        raise ValueError(f"step {step_id!r} (rag.query): with.top_k must be an integer >= 0")


def _check_moderate(step_id: str, config: Mapping[str, Any]) -> None:
    for key in ("blocked_terms", "rules"):
        terms = config.get(key, [])
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
            raise ValueError(
                f"step {step_id!r} (policy.moderate): with.{key} must be a list of text"
            )


def _check_classify(step_id: str, config: Mapping[str, Any]) -> None:
    labels = config.get("labels", list(DEFAULT_LABELS))
    if (
        not isinstance(labels, list)
        or not labels
        or not all(isinstance(label, str) and label for label in labels)
        or len(set(labels)) != len(labels)
    ):
        raise ValueError(
            f"step {step_id!r} (llm.classify): with.labels must be a non-empty list of "
            "distinct, non-empty texts"
        )


def _check_chat(step_id: str, config: Mapping[str, Any]) -> None:
    if "output" not in config:
        return
    schema = config["output"]
    problem = schema_problem(schema)
    if problem:
        raise ValueError(
            f"step {step_id!r} (llm.chat): with.output is not a JSON Schema: {problem}"
        )


_LLM_KEYS = frozenset({"system", "prompt", "model", "temperature", "max_tokens"})
TOOL_WITH_KEYS: dict[str, frozenset[str]] = {
    "llm.chat": _LLM_KEYS | {"output"},
    "llm.classify": _LLM_KEYS | {"labels"},
    "llm.generate": _LLM_KEYS,
    "policy.moderate": _LLM_KEYS | {"rules", "blocked_terms"},
    "rag.query": _LLM_KEYS | {"documents", "top_k", "query"},
    "http.request": frozenset({"url"}),
}
"""The ``with`` keys each built-in tool reads; any other key is refused at pull time, so
nothing in a spec is silently ignored. A code tool takes any ``with``."""

DEFAULT_LABELS = ("positive", "negative", "mixed", "neutral")
"""The labels ``llm.classify`` chooses from when its step names none."""

TOOL_CONFIG_CHECKS: dict[str, Callable[[str, Mapping[str, Any]], None]] = {
    "http.request": _check_http,
    "rag.query": _check_rag,
    "policy.moderate": _check_moderate,
    "llm.classify": _check_classify,
    "llm.chat": _check_chat,
}
"""What each tool needs in ``with``: checked at pull time, so a runner never starts on it."""


def _check_llm_keys(
    step_id: str, tool: str, config: Mapping[str, Any], deps: tuple[str, ...]
) -> None:
    """The keys every LLM tool shares: templates that parse and read only the step's deps,
    a model name, a temperature and a token limit of the right types."""
    for key in TEMPLATE_KEYS:
        if key not in config:
            continue
        source = config[key]
        if not isinstance(source, str):
            raise ValueError(f"step {step_id!r} ({tool}): with.{key} must be a text template")
        try:
            check_template(source, deps=deps)
        except TemplateInvalid as exc:
            raise ValueError(f"step {step_id!r} ({tool}): with.{key}: {exc}") from None
    model = config.get("model", "x")
    if not isinstance(model, str) or not model:
        raise ValueError(f"step {step_id!r} ({tool}): with.model must be a model name")
    temperature = config.get("temperature", 0)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise ValueError(f"step {step_id!r} ({tool}): with.temperature must be a number")
    if not 0 <= temperature <= 2:
        raise ValueError(f"step {step_id!r} ({tool}): with.temperature must be between 0 and 2")
    max_tokens = config.get("max_tokens", 1)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"step {step_id!r} ({tool}): with.max_tokens must be an integer >= 1")


def schema_problem(schema: Any) -> str:
    """Why ``schema`` is not a JSON Schema (draft 2020-12), or "" when it is one."""
    if not isinstance(schema, dict | bool):
        return f"a schema is an object, got {type(schema).__name__}"
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = _json_path(exc.path)
        return f"{exc.message} (at {where})" if where != "$" else exc.message
    return ""


def _json_path(path: Any) -> str:
    """``$.a[0].b``: a JSON path to a place in a document or a schema."""
    text = "$"
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


TOOL_TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "llm.generate": ("text",),
    "rag.query": ("guidance",),
    "llm.classify": ("label",),
    "policy.moderate": (),
}
"""Text fields of each built-in tool's output (``http.request`` returns whatever it is sent)."""
REPLY_TOOL = "llm.generate"
"""The tool that writes text for people: a workflow's default reply is its last such step."""
STREAMED_FIELD = "text"
"""The output field an LLM step's streamed tokens make up."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class WorkflowMetadata(_Frozen):
    name: str
    version: str

    @field_validator("name")
    @classmethod
    def _name_is_label(cls, value: str) -> str:
        return check_dns_label(value, what="workflow name", max_len=40)

    @field_validator("version")
    @classmethod
    def _version_is_semver(cls, value: str) -> str:
        if not SEMVER.match(value):
            raise ValueError(f"version {value!r} is not semver")
        return value


class CodeArchive(_Frozen):
    """The workflow's own Python code: an archive beside workflow.yaml, pinned by digest."""

    archive: str = Field(
        description="File name of the .tar.gz beside workflow.yaml in the registry.",
        examples=["code.tar.gz"],
    )
    digest: str = Field(description="sha256:<64 hex> of the archive's bytes.")
    requirements: tuple[str, ...] = Field(
        default=(),
        max_length=MAX_REQUIREMENTS,
        description="pip requirement strings installed into the code's environment.",
        examples=[["rapidfuzz>=3,<4"]],
    )

    @field_validator("archive")
    @classmethod
    def _archive_is_a_file_name(cls, value: str) -> str:
        if not ARCHIVE_NAME.match(value) or value in (".", ".."):
            raise ValueError(
                f"archive {value!r} must be a file name beside workflow.yaml "
                "(letters, digits, '.', '_', '-'; no '/')"
            )
        return value

    @field_validator("digest")
    @classmethod
    def _digest_shape(cls, value: str) -> str:
        if not SHA256_PIN.match(value):
            raise ValueError("digest must be sha256:<64 lowercase hex digits>")
        return value

    @field_validator("requirements")
    @classmethod
    def _requirements_parse(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for text in value:
            try:
                Requirement(text)
            except InvalidRequirement as exc:
                raise ValueError(f"requirement {text!r} is not a pip requirement: {exc}") from None
        return value


class Runtime(_Frozen):
    image: str = Field(min_length=1, max_length=512)
    entrypoint: str = Field(default=DEFAULT_ENTRYPOINT, min_length=1, max_length=1024)
    code: CodeArchive | None = None


class CodeTool(_Frozen):
    """One of the workflow's own tools: a Python function in its code or image."""

    name: str = Field(description="Dotted name steps use, like crm.lookup.")
    call: str = Field(description="module:function, imported from the code's root.")
    side_effects: bool = Field(
        default=False,
        alias="sideEffects",
        description="True: never cached, never retried, not executed in shadow calls.",
    )
    timeout: str = Field(default="30s", description="Duration; past it the step fails.")
    dry_run: Any = Field(
        default=None,
        alias="dryRun",
        description="The output a shadow call answers instead of calling a side-effect tool.",
    )

    @field_validator("name")
    @classmethod
    def _name_is_dotted(cls, value: str) -> str:
        if not TOOL_NAME.match(value) or len(value) > 128:
            raise ValueError(f"tool name {value!r} must be dotted lowercase, like crm.lookup")
        if value in KNOWN_TOOLS:
            raise ValueError(f"tool name {value!r} is a built-in tool's; choose another")
        return value

    @field_validator("call")
    @classmethod
    def _call_shape(cls, value: str) -> str:
        if not CALL_TARGET.match(value):
            raise ValueError(f"call {value!r} must be module:function, like acme.tools:lookup")
        return value

    @field_validator("timeout")
    @classmethod
    def _timeout_shape(cls, value: str) -> str:
        seconds = duration_seconds(value)
        if not 0.001 <= seconds <= 3600:
            raise ValueError(f"timeout must be between 1ms and 1h, got {value!r}")
        return value

    @property
    def timeout_s(self) -> float:
        return duration_seconds(self.timeout)


class Step(_Frozen):
    id: str = Field(pattern=r"^[a-z][a-z0-9_]{0,62}$")
    tool: str
    deps: tuple[str, ...] = Field(default=(), max_length=MAX_DEPS)
    with_: Mapping[str, Any] = Field(default_factory=dict, alias="with")

    @model_validator(mode="after")
    def _with_fits_the_tool(self) -> "Step":
        allowed = TOOL_WITH_KEYS.get(self.tool)
        if allowed is None:  # a code tool: its with is its own business
            return self
        unknown = sorted(set(self.with_) - allowed)
        if unknown:
            raise ValueError(
                f"step {self.id!r} ({self.tool}): unknown with key {unknown[0]!r} "
                f"(known: {', '.join(sorted(allowed))})"
            )
        if self.tool in LLM_TOOLS:
            _check_llm_keys(self.id, self.tool, self.with_, self.deps)
        check = TOOL_CONFIG_CHECKS.get(self.tool)
        if check is not None:
            check(self.id, self.with_)
        return self


class Requirements(_Frozen):
    gpu_class: str | None = Field(default=None, alias="gpuClass")
    gpu_count: int = Field(default=0, ge=0, le=16, alias="gpuCount")
    memory_gib: int = Field(default=1, ge=1, le=2048, alias="memoryGiB")


class Reply(_Frozen):
    """Which step's output is the workflow's reply text, and which field of it."""

    step: str = Field(description="Id of the step whose output holds the reply.")
    field: str = Field(
        default="text",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$",
        description="Key of the reply text in that step's output.",
    )


class WorkflowSpec(_Frozen):
    description: str = Field(default="", max_length=4096)
    runtime: Runtime
    steps: tuple[Step, ...] = Field(min_length=1, max_length=MAX_STEPS)
    requirements: Requirements = Field(default_factory=Requirements)
    vars: dict[str, Any] = Field(
        default_factory=dict, description="Constants the step templates read as vars."
    )
    input: dict[str, Any] | None = Field(
        default=None, description="JSON Schema every invoke body must match."
    )
    tools: tuple[CodeTool, ...] = Field(default=(), max_length=MAX_TOOLS)
    reply: Reply | None = Field(
        default=None,
        description=(
            "The step (and field) whose output is the reply OpenAI clients read; default: "
            "the `text` of the last llm.generate step, else of the last step nothing depends on."
        ),
    )

    @model_validator(mode="after")
    def _steps_form_a_dag(self) -> "WorkflowSpec":
        topological_order(self.steps)
        return self

    @model_validator(mode="after")
    def _input_is_a_schema(self) -> "WorkflowSpec":
        if self.input is not None:
            problem = schema_problem(self.input)
            if problem:
                raise ValueError(f"input is not a JSON Schema: {problem}")
        return self

    @model_validator(mode="after")
    def _tools_are_known(self) -> "WorkflowSpec":
        own = [tool.name for tool in self.tools]
        duplicates = sorted({name for name in own if own.count(name) > 1})
        if duplicates:
            raise ValueError(f"tools: {', '.join(duplicates)} declared more than once")
        for step in self.steps:
            if step.tool not in KNOWN_TOOLS and step.tool not in own:
                known = ", ".join([*sorted(KNOWN_TOOLS), *own])
                raise ValueError(f"step {step.id!r}: unknown tool {step.tool!r} (known: {known})")
        return self

    def code_tool(self, name: str) -> CodeTool | None:
        """The spec's own tool of that name; None for a built-in."""
        return next((tool for tool in self.tools if tool.name == name), None)

    @model_validator(mode="after")
    def _reply_names_a_text_field(self) -> "WorkflowSpec":
        if self.reply is None:
            return self
        tools = {step.id: step.tool for step in self.steps}
        tool = tools.get(self.reply.step)
        if tool is None:
            raise ValueError(
                f"reply.step {self.reply.step!r} is not a step (steps: {', '.join(tools)})"
            )
        fields = TOOL_TEXT_FIELDS.get(tool)
        if fields is not None and self.reply.field not in fields:
            writes = f"writes text in: {', '.join(fields)}" if fields else "writes no text"
            raise ValueError(
                f"reply.field {self.reply.field!r}: step {self.reply.step!r} ({tool}) {writes}"
            )
        return self

    def reply_source(self) -> Reply:
        """The reply as declared, or the default: the ``text`` of the last ``llm.generate``
        step in dependency order, else of the last step no other step depends on."""
        if self.reply is not None:
            return self.reply
        by_id = {step.id: step for step in self.steps}
        order = topological_order(self.steps)
        writers = [step_id for step_id in order if by_id[step_id].tool == REPLY_TOOL]
        if writers:
            return Reply(step=writers[-1])
        needed = {dep for step in self.steps for dep in step.deps}
        return Reply(step=[step.id for step in self.steps if step.id not in needed][-1])


class Workflow(_Frozen):
    api_version: Literal["microagents.dev/v1"] = Field(alias="apiVersion")
    kind: Literal["Workflow"]
    metadata: WorkflowMetadata
    spec: WorkflowSpec


def topological_order(steps: tuple[Step, ...]) -> list[str]:
    """Step ids in an order where deps come first; raises ``ValueError`` on a broken DAG."""
    ids = [step.id for step in steps]
    seen: set[str] = set()
    for step_id in ids:
        if step_id in seen:
            raise ValueError(f"duplicate step id {step_id!r}")
        seen.add(step_id)
    deps = {step.id: step.deps for step in steps}
    for step in steps:
        for dep in step.deps:
            if dep not in seen:
                raise ValueError(f"step {step.id!r} depends on unknown step {dep!r}")
    order: list[str] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> None:
        if state.get(node) == 2:
            return
        if state.get(node) == 1:
            cycle = [*path[path.index(node) :], node]
            raise ValueError(f"steps form a cycle: {' -> '.join(cycle)}")
        state[node] = 1
        for dep in deps[node]:
            visit(dep, [*path, node])
        state[node] = 2
        order.append(node)

    for step_id in ids:
        visit(step_id, [])
    return order


def spec_digest(raw: bytes) -> str:
    """The content address of a spec file: ``sha256:<hex>`` of its bytes."""
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def parse_workflow(raw: bytes) -> Workflow:
    """Parse and validate spec bytes; raises ``SpecInvalid`` naming the first problem."""
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecInvalid(f"spec is {len(raw)} bytes, over the {MAX_SPEC_BYTES}-byte bound")
    try:
        document = yaml.load(raw, Loader=SafeLoader)
    except yaml.YAMLError as exc:
        raise SpecInvalid(f"spec is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(document, dict):
        raise SpecInvalid("spec must be a YAML mapping with apiVersion, kind, metadata, spec")
    try:
        return Workflow.model_validate(document)
    except ValidationError as exc:
        raise SpecInvalid(f"spec is invalid: {describe_validation_error(exc)}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem, ``field.path: message``, for users rather than developers."""
    parts = []
    errors = exc.errors()
    for error in errors:
        if error["type"] == "too_short" and any(
            other["loc"][: len(error["loc"])] == error["loc"] and other is not error
            for other in errors
        ):
            continue  # "steps: at least 1 item" only because the one step was refused
        location = _field_path(error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        parts.append(f"{location}: {message}" if location else message)
    return "; ".join(parts)


def _field_path(loc: tuple[int | str, ...]) -> str:
    """``spec.steps[2].id``: list positions in brackets, as users index their YAML."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part != "function-after":
            path += f".{part}" if path else part
    return path
