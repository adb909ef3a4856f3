"""The DAG executor: runs one invocation of a workflow, each step as soon as its deps are done.

Steps whose dependencies have finished run concurrently as asyncio tasks on the caller's
loop (no thread hops). Each step gets ``{"input": body, "steps": {dep: output}, "with":
config}``. The first failing step fails the invocation with ``StepFailed`` naming it, and
every other running step is cancelled. Outputs of cacheable tools are memoised in a
``StepCache`` keyed by (spec digest, step id, canonical JSON of the step input).

A side-effect tool (``sideEffects: true``, ``http.request``) is never cached; its calls are
noted in the invocation's ``EffectLog`` when the caller keeps one, and in a shadow call it
is not run at all: the step answers the tool's ``dry_run`` output. The invocation's
shadow flag is set for the steps' tasks and threads (``plnt_runner.shadow``), so the calls
they make carry ``x-plnt-shadow``.

What this module is not: it does not speak HTTP, pick tools, or shape the response body.
"""

import asyncio
import copy
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from opentelemetry.trace import StatusCode

from plnt_common import tracing
from plnt_common.errors import PlntError, SpecInvalid
from plnt_common.logs import get_logger
from plnt_common.metrics import STEP_DURATION
from plnt_common.workflow import Reply, Step, Workflow, topological_order
from plnt_runner.cache import StepCache
from plnt_runner.effects import EffectLog
from plnt_runner.errors import StepFailed
from plnt_runner.metrics import DRY_RUNS
from plnt_runner.shadow import invocation_scope
from plnt_runner.tools import Tool, ToolContext, json_path
from plnt_runner.usage import TokenUsage

log = get_logger("plnt.runner.executor")
_TRACER = tracing.tracer("plnt.runner.executor")


@dataclass(frozen=True, slots=True)
class StepFinished:
    """A step produced its output (``cached`` when it came from the step cache)."""

    step: str
    tool: str
    output: Any
    duration_ms: float
    cached: bool
    usage: TokenUsage = field(default_factory=TokenUsage)
    """Tokens this run of the step spent: none when served from the cache."""
    dry_run: bool = False
    """A side-effect tool not run (a shadow call): ``output`` is the tool's dry-run answer."""


@dataclass(frozen=True, slots=True)
class TokenEmitted:
    """A text delta an LLM step produced while streaming."""

    step: str
    delta: str


Event = StepFinished | TokenEmitted
EventSink = Callable[[Event], None]
"""Receives events synchronously, on the loop; it must not block (queue them instead)."""


@dataclass(frozen=True, slots=True)
class Invocation:
    """A finished invocation: every step's result, in the spec's topological order."""

    steps: dict[str, StepFinished]
    duration_ms: float


def canonical_json(value: Any) -> bytes:
    """Stable bytes of a JSON value: sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class _Plan:
    """What the executor precomputes per step so that running one costs next to nothing."""

    __slots__ = (
        "cacheable",
        "config",
        "config_json",
        "dependents",
        "dry_runs",
        "hist_error",
        "hist_ok",
        "span_attributes",
        "span_name",
        "step",
        "timeout_s",
        "tool",
    )

    def __init__(
        self, *, step: Step, tool: Tool, workflow: str, dependents: list[str], timeout_s: float
    ) -> None:
        self.step = step
        self.tool = tool
        self.timeout_s = timeout_s
        # A side-effect step skipped from the cache would silently not act (or, dry, would
        # store its dry answer): never cached, whatever the tool says.
        self.cacheable = tool.cacheable and not tool.side_effects
        self.dry_runs = DRY_RUNS.labels(workflow, step.tool)
        self.config = dict(step.with_)
        self.config_json = canonical_json(self.config)
        self.dependents = dependents
        self.hist_ok = STEP_DURATION.labels(workflow, step.id, step.tool, "ok")
        self.hist_error = STEP_DURATION.labels(workflow, step.id, step.tool, "error")
        self.span_name = f"step {step.id}"
        self.span_attributes = {"plnt.step.id": step.id, "plnt.step.tool": step.tool}


class Executor:
    """Runs invocations of one workflow with one tool registry; safe for concurrent use."""

    def __init__(
        self,
        *,
        workflow: Workflow,
        digest: str,
        tools: Mapping[str, Tool],
        cache: StepCache | None,
        step_timeout_s: float,
    ) -> None:
        """Raises ``SpecInvalid`` when a step names a tool missing from ``tools``."""
        steps = workflow.spec.steps
        self._order = topological_order(steps)
        self._digest = digest.encode()
        self._cache = cache
        self._timeout = step_timeout_s
        dependents: dict[str, list[str]] = {s.id: [] for s in steps}
        for step in steps:
            for dep in step.deps:
                dependents[dep].append(step.id)
        self._plans: dict[str, _Plan] = {}
        for step in steps:
            tool = tools.get(step.tool)
            if tool is None:
                raise SpecInvalid(f"step {step.id!r} names tool {step.tool!r}, not available here")
            code_tool = workflow.spec.code_tool(step.tool)
            # A code tool has its own deadline; the runner's step deadline bounds it too.
            timeout_s = min(step_timeout_s, code_tool.timeout_s) if code_tool else step_timeout_s
            self._plans[step.id] = _Plan(
                step=step,
                tool=tool,
                workflow=workflow.metadata.name,
                dependents=dependents[step.id],
                timeout_s=timeout_s,
            )
        self._roots = [s.id for s in steps if not s.deps]
        self.sinks = [s.id for s in steps if not dependents[s.id]]
        """Steps no other step depends on: their outputs are the invocation's output."""
        self.reply: Reply = workflow.spec.reply_source()
        """The step and field whose output is the invocation's reply text."""
        schema = workflow.spec.input
        self._input = Draft202012Validator(schema) if schema is not None else None

    def input_problem(self, body: Any) -> str | None:
        """Why ``body`` does not match the spec's ``input`` schema (``at $.path: ...``), or
        None when it matches or the spec declares none. Call it before ``run``."""
        if self._input is None:
            return None
        error = best_match(self._input.iter_errors(body))
        if error is None:
            return None
        return (
            f"input does not match spec.input at {json_path(error.absolute_path)}: {error.message}"
        )

    @property
    def order(self) -> list[str]:
        """Step ids, deps first."""
        return list(self._order)

    async def run(
        self,
        body: Mapping[str, Any],
        *,
        on_event: EventSink | None = None,
        shadow: bool = False,
        effects: EffectLog | None = None,
    ) -> Invocation:
        """Execute every step once for ``body``.

        ``shadow``: a shadow call, whose side-effect tools answer their dry run instead of
        running. ``effects`` receives each side-effect call (executed, or intended in a
        shadow call) in the order they start, also when a step fails.

        Raises ``StepFailed`` naming the first step that failed (the others are cancelled).
        Cancelling ``run`` cancels every running step.
        """
        started = time.perf_counter()
        run = _Run(self, body, on_event, shadow=shadow, effects=effects)
        with invocation_scope(shadow=shadow):  # the step tasks copy it when created
            await run.execute()
        results = {step_id: run.results[step_id] for step_id in self._order}
        return Invocation(steps=results, duration_ms=(time.perf_counter() - started) * 1000)


class _Run:
    """The state of one invocation."""

    def __init__(
        self,
        executor: Executor,
        body: Mapping[str, Any],
        on_event: EventSink | None,
        *,
        shadow: bool,
        effects: EffectLog | None,
    ) -> None:
        self.ex = executor
        self.body = body
        self.on_event = on_event
        self.shadow = shadow
        self.effects = effects
        self.results: dict[str, StepFinished] = {}
        self.waiting = {sid: len(p.step.deps) for sid, p in executor._plans.items()}
        self._body_json: bytes | None = None

    async def execute(self) -> None:
        tasks: dict[asyncio.Task[StepFinished], str] = {}
        for step_id in self.ex._roots:
            tasks[asyncio.create_task(self._step(step_id))] = step_id
        try:
            while tasks:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    step_id = tasks.pop(task)
                    finished = task.result()  # raises StepFailed: the finally cancels the rest
                    self.results[step_id] = finished
                    if self.on_event is not None:
                        self.on_event(finished)
                    for child in self.ex._plans[step_id].dependents:
                        self.waiting[child] -= 1
                        if self.waiting[child] == 0:
                            tasks[asyncio.create_task(self._step(child))] = child
        finally:
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _step(self, step_id: str) -> StepFinished:
        if tracing.ENABLED:
            return await self._traced_step(step_id)
        return await self._run_step(step_id)

    async def _traced_step(self, step_id: str) -> StepFinished:
        """``_run_step`` in a span ``step <id>``, a child of the runner's (the task copied
        its context); an LLM call of the step is the span's child."""
        plan = self.ex._plans[step_id]
        span = _TRACER.start_span(plan.span_name, attributes=plan.span_attributes)
        token = tracing.activate(span)
        try:
            finished = await self._run_step(step_id)
        except StepFailed as exc:
            span.set_attribute("error.type", exc.reason)
            span.record_exception(exc.__cause__ or exc)
            span.set_status(StatusCode.ERROR, exc.cause)
            raise
        except asyncio.CancelledError:
            # A sibling failed: not this step's error.
            span.set_attribute("plnt.step.cancelled", True)
            raise
        else:
            span.set_attribute("plnt.step.cache_hit", finished.cached)
            if finished.dry_run:
                span.set_attribute("plnt.step.dry_run", True)
            return finished
        finally:
            tracing.deactivate(token)
            span.end()

    async def _run_step(self, step_id: str) -> StepFinished:
        plan = self.ex._plans[step_id]
        step = plan.step
        step_input = {
            "input": self.body,
            "steps": {dep: self.results[dep].output for dep in step.deps},
            "with": plan.config,
        }
        started = time.perf_counter()
        if plan.tool.side_effects:
            intent = (
                self.effects.record(tool=step.tool, tool_input=step_input)
                if self.effects is not None
                else None
            )
            if self.shadow:
                plan.dry_runs.inc()
                log.debug(
                    "dry_run",
                    step=step_id,
                    tool=step.tool,
                    input_sha256=intent.input_sha256 if intent else None,
                )
                elapsed = time.perf_counter() - started
                plan.hist_ok.observe(elapsed)
                output = copy.deepcopy(plan.tool.dry_run)  # later steps may change theirs
                return StepFinished(
                    step_id, step.tool, output, elapsed * 1000, cached=False, dry_run=True
                )
        key = ""
        cache = self.ex._cache if plan.cacheable else None
        if cache is not None:
            key = self._cache_key(plan, step_input["steps"])
            hit, output = cache.get(key)
            if hit:
                elapsed = time.perf_counter() - started
                plan.hist_ok.observe(elapsed)
                return StepFinished(step_id, step.tool, output, elapsed * 1000, cached=True)
        emit = None
        if self.on_event is not None:
            sink = self.on_event

            def emit(delta: str) -> None:
                sink(TokenEmitted(step_id, delta))

        usage = TokenUsage()
        try:
            async with asyncio.timeout(plan.timeout_s):
                output = await plan.tool.run(step_input, ToolContext(step_id, emit, usage))
        except TimeoutError:
            plan.hist_error.observe(time.perf_counter() - started)
            raise StepFailed(
                step=step_id, tool=step.tool, cause=f"timed out after {plan.timeout_s:g}s"
            ) from None
        except PlntError as exc:
            plan.hist_error.observe(time.perf_counter() - started)
            raise StepFailed(step=step_id, tool=step.tool, cause=str(exc)) from None
        except Exception as exc:  # a bug in a tool: report it, keep the traceback in the log
            plan.hist_error.observe(time.perf_counter() - started)
            log.exception("step_crashed", step=step_id, tool=step.tool)
            raise StepFailed(
                step=step_id, tool=step.tool, cause=f"{type(exc).__name__}: {exc}"
            ) from exc
        elapsed = time.perf_counter() - started
        plan.hist_ok.observe(elapsed)
        if cache is not None:
            cache.put(key, output)
        return StepFinished(step_id, step.tool, output, elapsed * 1000, cached=False, usage=usage)

    def _cache_key(self, plan: _Plan, dep_outputs: Mapping[str, Any]) -> str:
        """sha256 over (digest, step id, canonical step input); the body's canonical JSON is
        computed once per invocation, not once per step."""
        if self._body_json is None:
            self._body_json = canonical_json(self.body)
        digest = hashlib.sha256(self.ex._digest)
        for part in (plan.step.id.encode(), self._body_json, canonical_json(dep_outputs)):
            digest.update(b"\x00")
            digest.update(part)
        digest.update(b"\x00")
        digest.update(plan.config_json)
        return digest.hexdigest()
