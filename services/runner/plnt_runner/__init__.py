"""plnt runner: executes one workflow (a DAG of LLM-calling steps) and serves it over HTTP.

``POST /invoke`` runs the workflow on a JSON body (JSON or server-sent events back),
``/healthz`` and ``/metrics`` serve operators. Steps whose deps are met run concurrently;
LLM-backed steps are cached by (spec digest, step, input). This package does not deploy,
route or scale anything: the saga, the router and the local backend do that.

Public entry: ``plnt_runner.serve()`` runs the runner over the spec's steps and its own code
tools (``spec.tools``, each ``module:function``), exactly as ``python -m plnt_runner`` does,
so an image's own ``__main__`` can do its set-up and then serve::

    import plnt_runner

    if __name__ == "__main__":
        configure_my_clients()
        plnt_runner.serve()

Tool authors: ``plnt_runner.is_shadow()`` is true while the current call is a shadow call
(``x-plnt-shadow: 1``: a copy of a live call sent to a candidate, whose side-effect tools
answer their ``dryRun`` instead of running), and ``plnt_runner.outbound_headers()`` is what
a tool adds to any call it makes (``{"x-plnt-shadow": "1"}`` then, ``{}`` otherwise).

Layers: ``executor``, ``tools``, ``cache``, ``admission``, ``prompts``, ``heuristics`` and
``offline`` do no I/O; ``code_tools`` imports and calls the workflow's own functions;
``adapters`` talk to the network and NVML; ``handlers`` and ``app`` speak HTTP and wire the
parts.
"""

from plnt_runner.app import create_app, main, serve, serve_app
from plnt_runner.settings import RunnerSettings
from plnt_runner.shadow import is_shadow, outbound_headers

__all__ = [
    "RunnerSettings",
    "create_app",
    "is_shadow",
    "main",
    "outbound_headers",
    "serve",
    "serve_app",
]
