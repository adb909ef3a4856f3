"""structlog set up once per process: JSON lines to stderr, one context per saga step.

Handlers bind ``sagaid``, ``event``, ``namespace`` and ``name`` with ``bind_saga`` so every
line they log carries them.
"""

import logging
import sys
from typing import Any

import structlog


def configure_logging(*, level: str = "info", fmt: str = "json", service: str = "") -> None:
    """Route structlog and stdlib logging to stderr as JSON (or console text)."""
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback
        )
    )
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr)
    if service:
        structlog.contextvars.bind_contextvars(service=service)


def get_logger(name: str = "plnt") -> Any:
    return structlog.get_logger(name)
