"""One way to run a process's event loop: uvloop's, or asyncio's own on Windows.

uvloop (libuv underneath) runs the same asyncio programs with less CPU per message: the
saga services spend most of their time waking up for small NATS messages, and on the
2-core benchmark machine it cut their CPU per deploy by about 15% (docs/benchmarks.md).
It is not built for Windows.
"""

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, on uvloop's loop where uvloop exists."""
    if sys.platform == "win32":
        return asyncio.run(main)
    import uvloop

    return uvloop.run(main)
