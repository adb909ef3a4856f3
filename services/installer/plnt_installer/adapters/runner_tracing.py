"""The runner chart's ``tracing`` values: the installer's own tracing settings, passed on.

A call's trace runs router -> runner -> steps -> LLM, so runners export where the control
plane does. The OTLP headers are not passed: they come from a Secret in the control
plane's namespace, which runner pods (in the backend's namespace) cannot read.
"""

from collections.abc import Mapping
from typing import Any

from plnt_common import tracing


def runner_tracing(environ: Mapping[str, str]) -> dict[str, Any]:
    """``tracing`` values for ``charts/plnt-runner`` from the installer's ``OTEL_*`` and
    ``PLNT_TRACE_CONTENT``; an empty endpoint (tracing off) when the installer has none."""
    endpoint = tracing.endpoint_from(environ)
    if not endpoint or environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return {"endpoint": ""}
    traces_only = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces_only:  # the chart takes the base URL and adds /v1/traces
        endpoint = traces_only.removesuffix("/v1/traces")
    attributes = dict(
        pair.split("=", 1)
        for pair in environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(",")
        if "=" in pair
    )
    return {
        "endpoint": endpoint,
        "sampler": environ.get("OTEL_TRACES_SAMPLER", "").strip(),
        "samplerArg": environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip(),
        "resourceAttributes": {k.strip(): v.strip() for k, v in attributes.items()},
        "content": tracing.content_from(environ),
    }
