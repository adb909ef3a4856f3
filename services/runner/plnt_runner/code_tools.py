"""The workflow's own tools (``spec.tools``): Python functions named ``module:function``.

``load_code_tools`` imports every one when the runner starts, so a missing module or
function stops the runner at once with a message naming it, never at the first call.
Modules are imported from ``sys.path``: the runner's working directory holds the workflow's
code archive (the local backend starts it there, with that directory on the import path),
or the runner image installed the code.

A tool is called with one argument, the step input ``{"input": ..., "steps": {...},
"with": {...}}``, and returns JSON. A plain function runs in a worker thread so it cannot
stall the event loop; a coroutine function is awaited. The executor holds the deadline:
past the tool's ``timeout`` (or the runner's step timeout, if shorter) the step fails as
timed out; a thread still running then is left to finish, as Python cannot stop one. A
raise fails the step with the exception's type and message; the traceback goes to the
runner's log, never to callers. A tool with ``sideEffects: true`` is never cached (the
executor retries nothing, so it is never retried either), and in a shadow call it is not
called at all: the step answers its ``dryRun``. A tool that calls another service adds
``plnt_runner.outbound_headers()`` to that call (``x-plnt-shadow: 1`` in a shadow call);
``plnt_runner.is_shadow()`` says whether the current call is one. Both read a context
variable that ``asyncio.to_thread`` copies, so plain functions see it too.
"""

import asyncio
import importlib
import inspect
import json
from collections.abc import Callable, Iterable
from typing import Any

from plnt_common.errors import SpecInvalid
from plnt_common.logs import get_logger
from plnt_common.workflow import CodeTool
from plnt_runner.errors import CodeToolFailed
from plnt_runner.tools import StepInput, Tool, ToolContext

log = get_logger("plnt.runner.code_tools")


class CodeToolMissing(SpecInvalid):
    """A code tool's module cannot be imported, or holds no such function."""

    reason = "CodeToolMissing"


def load_code_tools(tools: Iterable[CodeTool]) -> dict[str, Tool]:
    """One ``Tool`` per spec tool, its function imported now; raises ``CodeToolMissing``
    naming the tool and what is missing."""
    return {spec.name: _CodeTool(spec, _import(spec)).as_tool() for spec in tools}


def _import(spec: CodeTool) -> Callable[..., Any]:
    module_name, _, function_name = spec.call.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise CodeToolMissing(
            f"tool {spec.name!r}: call {spec.call!r}: no module named {exc.name or module_name!r}"
        ) from None
    except Exception as exc:  # the module's own code raised while it was imported
        raise CodeToolMissing(
            f"tool {spec.name!r}: call {spec.call!r}: importing {module_name!r} raised "
            f"{type(exc).__name__}: {exc}"
        ) from None
    function = getattr(module, function_name, None)
    if function is None:
        raise CodeToolMissing(
            f"tool {spec.name!r}: call {spec.call!r}: module {module_name!r} has no "
            f"{function_name!r}"
        )
    if not callable(function):
        raise CodeToolMissing(
            f"tool {spec.name!r}: call {spec.call!r}: {function_name!r} is not callable"
        )
    return function  # type: ignore[no-any-return]


class _CodeTool:
    def __init__(self, spec: CodeTool, function: Callable[..., Any]) -> None:
        self.spec = spec
        self.function = function
        self.is_async = inspect.iscoroutinefunction(function)

    def as_tool(self) -> Tool:
        return Tool(
            name=self.spec.name,
            run=self.run,
            cacheable=not self.spec.side_effects,
            side_effects=self.spec.side_effects,
            dry_run=self.spec.dry_run,
        )

    async def run(self, step: StepInput, ctx: ToolContext) -> Any:
        argument = {"input": step["input"], "steps": dict(step["steps"]), "with": step["with"]}
        try:
            if self.is_async:
                output = await self.function(argument)
            else:
                output = await asyncio.to_thread(self.function, argument)
        except Exception as exc:
            log.warning("code_tool_raised", step=ctx.step_id, tool=self.spec.name, exc_info=True)
            raise CodeToolFailed(f"{type(exc).__name__}: {exc}") from None
        try:
            json.dumps(output)
        except (TypeError, ValueError) as exc:
            raise CodeToolFailed(
                f"tool {self.spec.name!r} returned a value that is not JSON: {exc}"
            ) from None
        return output
