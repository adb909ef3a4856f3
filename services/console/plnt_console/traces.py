"""W3C trace context as the pages show it: the trace id of a ``traceparent``."""

TRACEPARENT = "traceparent"
"""The header (HTTP, and NATS on saga events) that carries the trace context."""


def trace_id(traceparent: str) -> str:
    """The trace id of a W3C ``traceparent``; "" when it holds none."""
    parts = traceparent.strip().split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or parts[1] == "0" * 32:
        return ""
    return parts[1] if all(c in "0123456789abcdef" for c in parts[1]) else ""
