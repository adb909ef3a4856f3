"""A console app on a real HTTP server, following a real nats-server's runs and figures."""

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import aiohttp
from aiohttp.test_utils import TestServer

from plnt_cli.commands import Session
from plnt_cli.operate import RunAccess
from plnt_common.bus.bus import Bus
from plnt_common.resource_store import ResourceStore
from plnt_console.app import create_app, follow_bus
from plnt_console.board import Board

TOKEN = "s3cret-console-token"


@dataclass
class Console:
    url: str
    bus: Bus
    board: Board
    http: aiohttp.ClientSession


@contextlib.asynccontextmanager
async def running_console(
    nats_url: str, *, token: str = "", runs: Callable[[Bus], RunAccess] | None = None
) -> AsyncIterator[Console]:
    """``runs``: where the console finds WorkflowRuns, made on its bus; None: the store."""
    bus = await Bus.open(nats_url, service="console-test")
    board = Board()
    session = Session(bus=bus, store=ResourceStore(bus))
    app = create_app(board=board, session=session, token=token, runs=runs(bus) if runs else None)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with (
            follow_bus(board, bus),
            aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http,
        ):
            yield Console(url=str(server.make_url("")).rstrip("/"), bus=bus, board=board, http=http)
    finally:
        await server.close()
        await bus.close()
