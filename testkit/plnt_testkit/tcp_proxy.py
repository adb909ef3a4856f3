"""A TCP proxy that injects the faults real networks have: slowness and resets.

Sits between a client and a real server (moto S3 in the tests). ``mode`` can change while
it runs: ``pass`` forwards, ``slow`` holds each chunk from the server for ``delay_s``, and
``reset`` forwards ``reset_after_bytes`` of the server's answer, then resets the client's
connection (RST, not FIN), as a dying middlebox does mid-download.
"""

import asyncio
import socket
import struct
from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["pass", "slow", "reset"]


@dataclass
class FaultProxy:
    upstream_host: str
    upstream_port: int
    mode: Mode = "pass"
    delay_s: float = 0.0
    reset_after_bytes: int = 0
    connections: int = 0
    resets: int = 0
    _server: asyncio.Server | None = field(default=None, repr=False)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> "FaultProxy":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        self.connections += 1
        try:
            server_reader, server_writer = await asyncio.open_connection(
                self.upstream_host, self.upstream_port
            )
        except OSError:
            client_writer.close()
            return
        upstream = asyncio.create_task(self._pipe(client_reader, server_writer))
        try:
            await self._answer(server_reader, client_writer)
        finally:
            upstream.cancel()
            server_writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sent = 0
        try:
            while chunk := await reader.read(1024):
                if self.mode == "slow":
                    await asyncio.sleep(self.delay_s)
                if self.mode == "reset" and sent + len(chunk) > self.reset_after_bytes:
                    writer.write(chunk[: max(0, self.reset_after_bytes - sent)])
                    await writer.drain()
                    self._reset(writer)
                    return
                writer.write(chunk)
                await writer.drain()
                sent += len(chunk)
        except (ConnectionError, asyncio.CancelledError):
            pass
        writer.close()

    def _reset(self, writer: asyncio.StreamWriter) -> None:
        self.resets += 1
        sock = writer.get_extra_info("socket")
        if sock is not None:  # linger 0: close() sends RST instead of FIN
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
