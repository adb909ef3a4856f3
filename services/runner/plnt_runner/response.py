"""The JSON bodies the runner answers with: an invocation's result, and errors.

Pure functions from executor results to plain dicts; no HTTP and no I/O here.
"""

from collections.abc import Sequence
from typing import Any

from plnt_common.workflow import STREAMED_FIELD, Reply
from plnt_runner.executor import Invocation, StepFinished, TokenEmitted
from plnt_runner.usage import TokenUsage, total_usage


def invocation_body(
    *,
    invocation: Invocation,
    sinks: Sequence[str],
    reply: Reply,
    workflow: str,
    version: str,
    revision: str,
    provider: str,
) -> dict[str, Any]:
    """The response to a successful invocation.

    ``reply`` is the text the workflow declares as its reply (``spec.reply``, or its
    default), null when that step's output has no such text; ``usage`` sums the tokens
    every step spent. ``output`` holds each sink step's output under its step id, plus the
    reply text as ``reply`` (a sink step named ``reply`` keeps its name).
    """
    output: dict[str, Any] = {sink: invocation.steps[sink].output for sink in sinks}
    text = reply_text(invocation, reply)
    if text is not None and "reply" not in output:
        output["reply"] = text
    return {
        "workflow": workflow,
        "version": version,
        "revision": revision,
        "provider": provider,
        "duration_ms": round(invocation.duration_ms, 3),
        "reply": text,
        "usage": invocation_usage(invocation).as_dict(),
        "output": output,
        "steps": {step_id: step_body(result) for step_id, result in invocation.steps.items()},
    }


def invocation_usage(invocation: Invocation) -> TokenUsage:
    """The tokens every step of the invocation spent."""
    return total_usage(result.usage for result in invocation.steps.values())


def step_body(result: StepFinished) -> dict[str, Any]:
    """One step's entry in ``steps`` (and the data of an SSE ``step`` event, with ids);
    ``dry_run: true`` marks a side-effect step a shadow call did not run."""
    body: dict[str, Any] = {
        "output": result.output,
        "duration_ms": round(result.duration_ms, 3),
        "cached": result.cached,
        "usage": result.usage.as_dict(),
    }
    if result.dry_run:
        body["dry_run"] = True
    return body


def reply_text(invocation: Invocation, reply: Reply) -> str | None:
    """The text in the reply step's output field; None when it is not a string there."""
    output = invocation.steps[reply.step].output
    text = output.get(reply.field) if isinstance(output, dict) else None
    return text if isinstance(text, str) else None


def step_event(result: StepFinished) -> dict[str, Any]:
    """Data of the SSE ``step`` event."""
    return {"step": result.step, "tool": result.tool, **step_body(result)}


def token_event(token: TokenEmitted, *, reply: Reply) -> dict[str, Any]:
    """Data of the SSE ``token`` event; ``reply`` is true for the tokens of the reply text."""
    is_reply = token.step == reply.step and reply.field == STREAMED_FIELD
    return {"step": token.step, "delta": token.delta, "reply": is_reply}


def error_body(
    *, status: int, reason: str, message: str, step: str | None = None
) -> dict[str, Any]:
    """Every error the runner answers: ``{"error": message, "reason": ..., "status": ...}``,
    plus ``step`` when one step's failure caused it."""
    body: dict[str, Any] = {"error": message, "reason": reason, "status": status}
    if step is not None:
        body["step"] = step
    return body
