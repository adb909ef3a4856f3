"""The microagents ``Workflow`` spec (microagents.dev/v1) as pulled from a registry.

Valid means: unique step ids, every dep exists, no cycles, known tools, bounded sizes.
``parse_workflow`` is the one entry point from bytes; it raises ``SpecInvalid`` with a
message naming the problem.
"""

import hashlib
from collections.abc import Callable, Mapping
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from plnt_common.errors import SpecInvalid
from plnt_common.names import SEMVER, check_dns_label

# libyaml's loader parses a spec ~10x faster than the pure-Python one; same safe subset
SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_SPEC_BYTES = 256 * 1024
MAX_STEPS = 64
MAX_DEPS = 32

KNOWN_TOOLS = frozenset(
    {"llm.classify", "rag.query", "llm.generate", "policy.moderate", "http.request"}
)
"""Tools the runner implements; a spec naming any other tool is refused at pull time."""


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
    terms = config.get("blocked_terms", [])
    if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
        raise ValueError(
            f"step {step_id!r} (policy.moderate): with.blocked_terms must be a list of text"
        )


TOOL_CONFIG_CHECKS: dict[str, Callable[[str, Mapping[str, Any]], None]] = {
    "http.request": _check_http,
    "rag.query": _check_rag,
    "policy.moderate": _check_moderate,
}
"""What each tool needs in ``with``: checked at pull time, so a runner never starts on it."""


TOOL_TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "llm.generate": ("text",),
    "rag.query": ("guidance",),
    "llm.classify": ("sentiment", "topic"),
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


class Runtime(_Frozen):
    image: str = Field(min_length=1, max_length=512)
    entrypoint: str = Field(min_length=1, max_length=1024)


class Step(_Frozen):
    id: str = Field(pattern=r"^[a-z][a-z0-9_]{0,62}$")
    tool: str
    deps: tuple[str, ...] = Field(default=(), max_length=MAX_DEPS)
    with_: Mapping[str, Any] = Field(default_factory=dict, alias="with")

    @field_validator("tool")
    @classmethod
    def _tool_is_known(cls, value: str) -> str:
        if value not in KNOWN_TOOLS:
            raise ValueError(f"unknown tool {value!r} (known: {', '.join(sorted(KNOWN_TOOLS))})")
        return value

    @model_validator(mode="after")
    def _with_fits_the_tool(self) -> "Step":
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
    for error in exc.errors():
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
