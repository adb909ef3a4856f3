"""OpenTelemetry tracing of plnt's processes: set-up from the standard ``OTEL_*`` variables,
and the W3C ``traceparent`` carried in and out of any header mapping (HTTP or NATS).

``setup(service)`` installs a tracer provider with an OTLP/HTTP exporter only when
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set. Without
one nothing is installed and ``ENABLED`` stays False: hot paths test that flag and build
no span, no context and no header at all, so tracing off costs one attribute read.

The SDK itself reads the rest of the standard variables: ``OTEL_SERVICE_NAME`` (default
here ``plnt-<service>``), ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER`` and
``OTEL_TRACES_SAMPLER_ARG``, ``OTEL_BSP_*`` (batching) and ``OTEL_EXPORTER_OTLP_HEADERS``.
Only the TraceContext propagator is used: ``traceparent`` and ``tracestate``.

``PLNT_TRACE_CONTENT=true`` lets LLM spans carry prompt and completion text; off by default
because that text may hold personal data.

This module is not where spans are named or given attributes: each service does that.
"""

import os
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

from opentelemetry import context, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import DefaultGetter
from opentelemetry.trace import Span, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from plnt_common.errors import PlntError
from plnt_common.logs import get_logger

log = get_logger(__name__)

ENABLED = False
"""True once ``setup`` installed an exporter: the one check hot paths make before tracing."""
CONTENT_ENABLED = False
"""True when ``PLNT_TRACE_CONTENT`` opts in to prompt and completion text on LLM spans."""
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
CONTENT_VARIABLE = "PLNT_TRACE_CONTENT"
SUPPORTED_PROTOCOL = "http/protobuf"

_PROPAGATOR = TraceContextTextMapPropagator()
_GETTER = DefaultGetter()
_provider: Any = None


class TracingMisconfigured(PlntError):
    """An ``OTEL_*`` or ``PLNT_TRACE_*`` variable holds a value plnt cannot use."""


def endpoint_from(environ: Mapping[str, str]) -> str:
    """The OTLP endpoint the environment names for traces, or ``""`` when none."""
    return (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    )


def setup(service: str, environ: Mapping[str, str] | None = None) -> bool:
    """Install the tracer provider of the process ``plnt-<service>``; True when tracing is on.

    Does nothing and returns False when no OTLP endpoint is set or the SDK is disabled
    (``OTEL_SDK_DISABLED=true``). Raises ``TracingMisconfigured`` for a protocol other than
    ``http/protobuf`` or a ``PLNT_TRACE_CONTENT`` that is not a boolean.
    """
    global ENABLED, CONTENT_ENABLED, _provider
    env = os.environ if environ is None else environ
    endpoint = endpoint_from(env)
    if not endpoint or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "").strip()
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip()
        or SUPPORTED_PROTOCOL
    )
    if protocol != SUPPORTED_PROTOCOL:
        raise TracingMisconfigured(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported: plnt exports traces "
            f"with {SUPPORTED_PROTOCOL!r} (OTLP/HTTP); unset it or set it to that"
        )
    content = content_from(env)
    # Imported here: a process that never traces does not load the SDK and the exporter.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # Attributes given to Resource.create win over OTEL_SERVICE_NAME: pass ours only as the
    # default. The sampler (OTEL_TRACES_SAMPLER) and the exporter's URL, headers and
    # timeouts come from the environment through the SDK.
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: f"plnt-{service}"}
    provider = TracerProvider(resource=Resource.create(attributes))
    # The URL is passed rather than left to the exporter, which reads os.environ only.
    traces_url = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if not traces_url:
        traces_url = endpoint.rstrip("/") + "/v1/traces"
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url)))
    trace.set_tracer_provider(provider)
    _provider = provider
    ENABLED = True
    CONTENT_ENABLED = content
    log.info("tracing.enabled", endpoint=endpoint, service=f"plnt-{service}", content=content)
    return True


def setup_or_exit(service: str) -> bool:
    """``setup`` for a process's entry point: a misconfiguration is one line on stderr,
    ``plnt <service>: ...``, and exit code 2 (bad settings), never a traceback."""
    try:
        return setup(service)
    except TracingMisconfigured as exc:
        print(f"plnt {service}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def content_from(environ: Mapping[str, str]) -> bool:
    """Whether ``PLNT_TRACE_CONTENT`` opts in; ``TracingMisconfigured`` if not a boolean."""
    return _boolean(environ, CONTENT_VARIABLE)


def _boolean(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in ("", "false", "0", "no", "off"):
        return False
    if raw in ("true", "1", "yes", "on"):
        return True
    raise TracingMisconfigured(f"{name}={env[name]!r} is not a boolean: use true or false")


def force_flush(timeout_ms: int = 5_000) -> bool:
    """Export every finished span now; True when done in time (and when tracing is off)."""
    if _provider is None:
        return True
    return bool(_provider.force_flush(timeout_ms))


def shutdown() -> None:
    """Flush and stop the exporter (the SDK also does this at interpreter exit)."""
    if _provider is not None:
        _provider.shutdown()


def activate(span: Span) -> object:
    """Make ``span`` the current span; returns the token ``deactivate`` takes. Cheaper on a
    hot path than the ``start_as_current_span`` context manager (no generator)."""
    return context.attach(trace.set_span_in_context(span))


def activate_remote(traceparent: str) -> object:
    """Make the remote span ``traceparent`` names the current parent; returns the token
    ``deactivate`` takes."""
    return context.attach(extract({TRACEPARENT: traceparent}))


def deactivate(token: object) -> None:
    context.detach(token)  # type: ignore[arg-type]


def tracer(name: str) -> Tracer:
    """The tracer of instrumentation scope ``name`` (a no-op one while tracing is off)."""
    return trace.get_tracer(name)


def extract(headers: Mapping[str, str]) -> Context:
    """The remote parent that ``headers`` carry (``traceparent``/``tracestate``); an empty
    context when they carry none or a malformed one, so the span starts a new trace."""
    return _PROPAGATOR.extract(headers, getter=_GETTER)


def inject(headers: MutableMapping[str, str], context: Context | None = None) -> None:
    """Write ``traceparent`` (and ``tracestate``) of ``context``'s span, else the current
    span, into ``headers``: HTTP headers or a NATS message's headers alike."""
    _PROPAGATOR.inject(headers, context=context)


def traceparent(span: Span) -> str:
    """The W3C ``traceparent`` naming ``span``: ``00-<trace id>-<span id>-<flags>``."""
    return _formatted(span.get_span_context())


def _formatted(ctx: trace.SpanContext) -> str:
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def parent_traceparent() -> str:
    """The ``traceparent`` of the current span's parent (for a message handler's span: the
    header the message came with); ``""`` while tracing is off or there is none."""
    if not ENABLED:
        return ""
    parent = getattr(trace.get_current_span(), "parent", None)  # SDK spans only
    if parent is None or not parent.is_valid:
        return ""
    return _formatted(parent)


def exemplar() -> dict[str, str] | None:
    """``{"trace_id": ...}`` of the current span when it is sampled, for a histogram's
    ``observe(..., exemplar=...)``; None otherwise (and always while tracing is off)."""
    if not ENABLED:
        return None
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid or not ctx.trace_flags.sampled:
        return None
    return {"trace_id": f"{ctx.trace_id:032x}"}


def exemplar_of(traceparent: str) -> dict[str, str] | None:
    """``exemplar()`` for the span a ``traceparent`` of ours names, without making it current:
    None unless its flags say sampled."""
    if not traceparent.endswith("1"):
        return None
    return {"trace_id": traceparent[3:35]}


def annotate(attributes: Mapping[str, Any]) -> None:
    """Set ``attributes`` on the current span: how an adapter adds what only it learns (the
    model that answered) to the span its caller opened. Nothing while tracing is off."""
    if ENABLED:
        trace.get_current_span().set_attributes(attributes)


def continued_traceparent(incoming: str | None) -> str | None:
    """A ``traceparent`` in the trace ``incoming`` names, with a fresh span id: what a process
    that records no span answers (runner contract). None when ``incoming`` is not a valid
    version-00 ``traceparent``."""
    if incoming is None or len(incoming) != 55:
        return None
    version, trace_id, parent_id, flags = (
        incoming[0:2],
        incoming[3:35],
        incoming[36:52],
        incoming[53:],
    )
    if (
        version != "00"
        or incoming[2] != "-"
        or incoming[35] != "-"
        or incoming[52] != "-"
        or not _is_hex(trace_id + parent_id + flags)
        or trace_id == "0" * 32
        or parent_id == "0" * 16
    ):
        return None
    return f"00-{trace_id}-{os.urandom(8).hex()}-{flags}"


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)
