"""The router's runner client against a real socket server that writes exact bytes.

Each scripted runner answers the n-th request on any connection with the n-th script: byte
strings written in order (``PAUSE`` waits a little first, ``CLOSE`` ends the connection).
Counting the connections it accepted tells whether the client kept one alive.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from plnt_router.adapters.runner_connection import HIGH_WATER_BYTES, MAX_HEAD_BYTES
from plnt_router.adapters.upstream import RunnerClient, UpstreamReply
from plnt_router.errors import UpstreamTimeout, UpstreamUnavailable

PAUSE = b"<pause>"
CLOSE = b"<close>"
OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
Script = list[bytes]


@dataclass
class ScriptedRunner:
    """A loopback server answering requests with ``scripts``, one per request, in order."""

    scripts: list[Script]
    url: str = ""
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.scripts:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.requests.append(head + await reader.readexactly(length))
                for part in self.scripts.pop(0):
                    if part == CLOSE:
                        return
                    if part == PAUSE:
                        await asyncio.sleep(0.05)
                        continue
                    writer.write(part)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        finally:
            writer.close()


StartRunner = Callable[..., Awaitable[ScriptedRunner]]


@pytest.fixture
async def scripted() -> AsyncIterator[StartRunner]:
    servers: list[asyncio.Server] = []

    async def start(*scripts: Script) -> ScriptedRunner:
        runner = ScriptedRunner(scripts=list(scripts))
        server = await asyncio.start_server(runner.serve, "127.0.0.1", 0)
        servers.append(server)
        runner.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/invoke"
        return runner

    yield start
    for server in servers:
        server.close()


@pytest.fixture
async def client() -> AsyncIterator[RunnerClient]:
    client = RunnerClient(max_connections=4, timeout_s=2.0)
    await client.start()
    yield client
    await client.close()


async def call(client: RunnerClient, url: str) -> tuple[UpstreamReply, bytes]:
    """One JSON call read to the end, its connection handed back."""
    reply = await client.post(url=url, body=b"{}", headers={"x-test": "1"}, stream=False)
    try:
        return reply, await reply.read()
    finally:
        reply.close()


async def collect(reply: UpstreamReply, pieces: list[bytes]) -> None:
    """Stream the body into ``pieces``, so what came before a failure stays visible."""
    async for piece in reply.chunks():
        pieces.append(piece)


async def connections_after_another_call(client: RunnerClient, runner: ScriptedRunner) -> int:
    """Make one more call (its script: ``length_answer(b"{}")``): how many connections by now."""
    _, body = await call(client, runner.url)
    assert body == b"{}"
    return runner.connections


def length_answer(body: bytes, *, extra_head: bytes = b"") -> bytes:
    return OK_HEAD + extra_head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


async def test_a_body_read_to_the_end_leaves_the_connection_for_the_next_call(
    scripted: StartRunner, client: RunnerClient
) -> None:
    runner = await scripted(
        [OK_HEAD + b'Content-Length: 10\r\n\r\n{"a":', PAUSE, b' "b"}'],
        [length_answer(b"{}")],
    )
    _, first = await call(client, runner.url)
    assert first == b'{"a": "b"}'
    assert await connections_after_another_call(client, runner) == 1
    assert runner.requests[0].startswith(b"POST /invoke HTTP/1.1\r\n")
    assert b"\r\nx-test: 1\r\n" in runner.requests[0]


async def test_chunked_body_with_extensions_and_trailers_is_joined_and_the_connection_kept(
    scripted: StartRunner, client: RunnerClient
) -> None:
    chunked = (
        OK_HEAD + b'Transfer-Encoding: chunked\r\n\r\n4;name=value\r\n{"a"\r\n',
        PAUSE,
        b'6\r\n: "b"}\r\n0\r\nContent-Type: text/plain\r\nx-plnt-tokens: 9\r\n\r\n',
    )
    runner = await scripted(list(chunked), [length_answer(b"{}")])
    reply, body = await call(client, runner.url)
    assert body == b'{"a": "b"}'
    # trailers are not the answer's headers
    assert (reply.content_type, reply.header("x-plnt-tokens")) == ("application/json", None)
    assert await connections_after_another_call(client, runner) == 1


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
    ],
    ids=["204", "304-with-length"],
)
async def test_an_answer_that_has_no_body_ends_at_its_head(
    scripted: StartRunner, client: RunnerClient, head: bytes
) -> None:
    runner = await scripted([head], [length_answer(b"{}")])
    reply, body = await call(client, runner.url)
    assert (reply.status, body) == (int(head[9:12]), b"")
    # a 304's length announced no bytes to skip
    assert await connections_after_another_call(client, runner) == 1


async def test_interim_answers_are_skipped_for_the_final_one(
    scripted: StartRunner, client: RunnerClient
) -> None:
    runner = await scripted(
        [
            b"HTTP/1.1 100 Continue\r\n\r\n",
            PAUSE,
            b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\nx-plnt-revision: early\r\n\r\n",
            length_answer(b"{}", extra_head=b"x-plnt-revision: r2  \r\n"),
        ]
    )
    reply, body = await call(client, runner.url)
    assert (reply.status, reply.header("x-plnt-revision"), reply.header("link")) == (
        200,
        "r2",
        None,
    )
    assert body == b"{}"


@pytest.mark.parametrize(
    "answer",
    [
        length_answer(b"{}", extra_head=b"Connection: close\r\n"),
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}",
    ],
    ids=["connection-close", "http-1.0"],
)
async def test_an_answer_not_kept_alive_makes_the_next_call_connect_again(
    scripted: StartRunner, client: RunnerClient, answer: bytes
) -> None:
    runner = await scripted([answer], [length_answer(b"{}")])
    await call(client, runner.url)
    assert await connections_after_another_call(client, runner) == 2


async def test_a_body_without_length_or_chunks_ends_when_the_runner_closes(
    scripted: StartRunner, client: RunnerClient
) -> None:
    runner = await scripted(
        [OK_HEAD + b'\r\n{"a":', PAUSE, b' "b"}', CLOSE], [length_answer(b"{}")]
    )
    _, body = await call(client, runner.url)
    assert body == b'{"a": "b"}'
    assert await connections_after_another_call(client, runner) == 2


async def test_a_runner_closing_mid_body_is_unavailable_not_a_short_body(
    scripted: StartRunner, client: RunnerClient
) -> None:
    runner = await scripted([OK_HEAD + b'Content-Length: 10\r\n\r\n{"a"', PAUSE, CLOSE])
    reply = await client.post(url=runner.url, body=b"{}", headers={}, stream=False)
    with pytest.raises(UpstreamUnavailable, match="failed mid-call") as raised:
        await reply.read()
    reply.close()
    assert raised.value.before_send is False


async def test_a_stream_cut_inside_a_chunk_is_unavailable_after_the_bytes_that_came(
    scripted: StartRunner, client: RunnerClient
) -> None:
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    runner = await scripted([head + b"9\r\ndata: 1\n\n\r\n", PAUSE, b"a\r\ndata", PAUSE, CLOSE])
    reply = await client.post(url=runner.url, body=b"{}", headers={}, stream=True)
    assert reply.is_event_stream
    pieces: list[bytes] = []
    with pytest.raises(UpstreamUnavailable):
        await collect(reply, pieces)
    reply.close()
    assert b"".join(pieces) == b"data: 1\n\ndata"


@pytest.mark.parametrize(
    "answer",
    [
        b"SMTP ready\r\n\r\n",
        OK_HEAD + b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}",
        OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
        OK_HEAD + b"x-big: " + b"a" * MAX_HEAD_BYTES,
    ],
    ids=["not-http", "length-and-chunked", "bad-chunk-size", "head-too-large"],
)
async def test_an_invalid_answer_is_unavailable_naming_it(
    scripted: StartRunner, client: RunnerClient, answer: bytes
) -> None:
    runner = await scripted([answer, PAUSE, PAUSE])
    with pytest.raises(UpstreamUnavailable, match="invalid HTTP answer"):
        await call(client, runner.url)


async def test_bytes_past_the_end_of_an_answer_keep_it_but_drop_the_connection(
    scripted: StartRunner, client: RunnerClient
) -> None:
    runner = await scripted([length_answer(b"{}") + b"HTTP/1.1 200 OK\r\n"], [length_answer(b"{}")])
    _, body = await call(client, runner.url)
    assert body == b"{}"
    assert await connections_after_another_call(client, runner) == 2


async def test_a_stream_silent_longer_than_the_timeout_times_out_after_what_came(
    scripted: StartRunner,
) -> None:
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    # each gap (0.05 s) is within the timeout; the silence after them is not
    runner = await scripted(
        [head, PAUSE, b"9\r\ndata: 1\n\n\r\n", PAUSE, b"5\r\ndata:\r\n", *[PAUSE] * 8]
    )
    client = RunnerClient(max_connections=1, timeout_s=0.2)
    await client.start()
    try:
        reply = await client.post(url=runner.url, body=b"{}", headers={}, stream=True)
        pieces: list[bytes] = []
        with pytest.raises(UpstreamTimeout, match=r"did not answer within 0\.2s"):
            await collect(reply, pieces)
        reply.close()
    finally:
        await client.close()
    assert b"".join(pieces) == b"data: 1\n\ndata:"


async def test_a_body_larger_than_the_read_buffer_arrives_whole_through_back_pressure(
    scripted: StartRunner, client: RunnerClient
) -> None:
    body = bytes(range(256)) * (4 * HIGH_WATER_BYTES // 256)
    runner = await scripted([length_answer(body)], [length_answer(b"{}")])
    reply = await client.post(url=runner.url, body=b"{}", headers={}, stream=True)
    await asyncio.sleep(0.2)  # unread, the body fills the buffer and reading pauses
    try:
        got = await reply.read()
    finally:
        reply.close()
    assert got == body
    assert await connections_after_another_call(client, runner) == 1
