"""Errors of the runner, rooted in the project's ``PlntError`` hierarchy.

Tools and adapters raise ``ToolFailed`` (or a subclass) with a message a user can act on;
the executor wraps whatever a step raised into one ``StepFailed`` naming the step.
"""

from plnt_common.errors import PlntError


class ToolFailed(PlntError):
    """A tool could not produce an output for its step input."""

    reason = "ToolFailed"


class OutputInvalid(ToolFailed):
    """The model's answer did not match the step's output schema, asked twice."""

    reason = "OutputInvalid"


class CodeToolFailed(ToolFailed):
    """A workflow's own tool raised, timed out, or returned something that is not JSON."""

    reason = "CodeToolFailed"


class LLMUnavailable(ToolFailed):
    """The LLM endpoint was unreachable, answered non-2xx, or sent an unreadable body."""

    retryable = True
    reason = "LLMUnavailable"


class HttpStepFailed(ToolFailed):
    """An ``http.request`` step's target was unreachable or answered non-2xx."""

    retryable = True
    reason = "HttpStepFailed"


class StepFailed(PlntError):
    """One step of an invocation failed; the rest of the invocation was cancelled."""

    reason = "StepFailed"

    def __init__(self, *, step: str, tool: str, cause: str) -> None:
        super().__init__(f"step {step!r} ({tool}) failed: {cause}")
        self.step = step
        self.tool = tool
        self.cause = cause
