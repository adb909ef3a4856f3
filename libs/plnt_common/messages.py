"""Status messages several services write for the same outcome, written once.

Users read them in `plnt get` and tests assert them, so the wording is fixed here.
"""

SUPERSEDED = "a newer generation superseded this saga"
"""Why a saga ended when a newer generation of its WorkflowRun took over."""


def deadline_passed(phase: str, deadline_s: float) -> str:
    """The message of a saga step that timed out, e.g. ``Installing passed its 300s deadline``."""
    return f"{phase} passed its {deadline_s:g}s deadline"
