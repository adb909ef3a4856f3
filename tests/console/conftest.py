"""Fixtures of the console's server tests: the app on a real HTTP server and nats-server."""

from collections.abc import AsyncIterator

import pytest
from console_support import TOKEN, Console, running_console


@pytest.fixture
async def console(nats_url: str) -> AsyncIterator[Console]:
    async with running_console(nats_url) as running:
        yield running


@pytest.fixture
async def guarded_console(nats_url: str) -> AsyncIterator[Console]:
    async with running_console(nats_url, token=TOKEN) as running:
        yield running
