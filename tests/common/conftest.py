"""Fixtures of the shared-library tests."""

from collections.abc import AsyncIterator

import pytest

from plnt_common.bus.bus import Bus


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    """A provisioned bus on the test's own nats-server."""
    opened = await Bus.open(nats_url, service="test")
    yield opened
    await opened.close()
