"""The JSON bodies the runner answers with: an invocation's result, and errors.

Pure functions from executor results to plain dicts; no HTTP and no I/O here.
"""

from collections.abc import Sequence
from typing import Any

from plnt_runner.executor import Invocation, StepFinished, TokenEmitted

REPLY_TOOL = "llm.generate"


def invocation_body(
    *,
    invocation: Invocation,
    sinks: Sequence[str],
    workflow: str,
    version: str,
    revision: str,
    provider: str,
) -> dict[str, Any]:
    """The response to a successful invocation.

    ``output`` holds each sink step's output under its step id, plus ``reply``: the text of
    the most downstream ``llm.generate`` step, when the workflow has one (a sink step named
    ``reply`` keeps its name and no reply is added).
    """
    output: dict[str, Any] = {sink: invocation.steps[sink].output for sink in sinks}
    reply = _reply_text(invocation)
    if reply is not None and "reply" not in output:
        output["reply"] = reply
    return {
        "workflow": workflow,
        "version": version,
        "revision": revision,
        "provider": provider,
        "duration_ms": round(invocation.duration_ms, 3),
        "output": output,
        "steps": {step_id: step_body(result) for step_id, result in invocation.steps.items()},
    }


def step_body(result: StepFinished) -> dict[str, Any]:
    """One step's entry in ``steps`` (and the data of an SSE ``step`` event, with ids)."""
    return {
        "output": result.output,
        "duration_ms": round(result.duration_ms, 3),
        "cached": result.cached,
    }


def step_event(result: StepFinished) -> dict[str, Any]:
    """Data of the SSE ``step`` event."""
    return {"step": result.step, "tool": result.tool, **step_body(result)}


def token_event(token: TokenEmitted) -> dict[str, Any]:
    """Data of the SSE ``token`` event."""
    return {"step": token.step, "delta": token.delta}


def error_body(
    *, status: int, reason: str, message: str, step: str | None = None
) -> dict[str, Any]:
    """Every error the runner answers: ``{"error": message, "reason": ..., "status": ...}``,
    plus ``step`` when one step's failure caused it."""
    body: dict[str, Any] = {"error": message, "reason": reason, "status": status}
    if step is not None:
        body["step"] = step
    return body


def _reply_text(invocation: Invocation) -> str | None:
    reply = None
    for result in invocation.steps.values():  # topological order: the last one is downstream
        output = result.output
        if result.tool == REPLY_TOOL and isinstance(output, dict):
            text = output.get("text")
            if isinstance(text, str):
                reply = text
    return reply
