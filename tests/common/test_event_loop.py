"""Every plnt process runs its asyncio program through ``plnt_common.event_loop``."""

import asyncio
import sys

import pytest

from plnt_common import event_loop


async def running_loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is not built for Windows")
def test_a_process_runs_on_uvloops_loop() -> None:
    assert event_loop.run(running_loop_module()).startswith("uvloop")
