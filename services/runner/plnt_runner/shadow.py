"""Shadow calls: whether the current invocation is one, and what its outbound calls carry.

The router mirrors a share of live calls to a canary (or to the stable again, for the noise
floor) with ``x-plnt-shadow: 1``. In such a call the executor runs no side-effect tool (it
answers the tool's ``dryRun`` instead), and every call the runner makes for it carries the
same header, so an LLM gateway or a downstream service can tell shadow traffic apart.

The flag lives in a context variable the executor sets for one invocation: the asyncio
tasks and worker threads started for that invocation copy it, and concurrent invocations
never see each other's. What tool authors use: ``is_shadow()`` and ``outbound_headers()``
(both re-exported as ``plnt_runner.is_shadow`` and ``plnt_runner.outbound_headers``).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from plnt_common.shadow_pairs import SHADOW_HEADER

_SHADOW: ContextVar[bool] = ContextVar("plnt_runner_shadow", default=False)
_SHADOW_HEADERS = {SHADOW_HEADER: "1"}


def is_shadow() -> bool:
    """True while the current invocation is a shadow call (``x-plnt-shadow: 1``)."""
    return _SHADOW.get()


def outbound_headers() -> dict[str, str]:
    """Headers to add to every call made for the current invocation: ``{"x-plnt-shadow":
    "1"}`` in a shadow call, ``{}`` otherwise. A code tool that calls anything adds them."""
    return dict(_SHADOW_HEADERS) if _SHADOW.get() else {}


@contextmanager
def invocation_scope(*, shadow: bool) -> Iterator[None]:
    """Mark the code run inside (and every task and thread it starts) as one invocation."""
    token = _SHADOW.set(shadow)
    try:
        yield
    finally:
        _SHADOW.reset(token)


def flag_set(value: str | None) -> bool:
    """Whether a request header such as ``x-plnt-shadow`` or ``x-plnt-effects`` asks: ``1``."""
    return value is not None and value.strip() == "1"
