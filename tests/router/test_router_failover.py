"""Serving failover across backends: a revision spread over two backend endpoints.

The backends are runner-like servers in their own processes (``spread_backend``), killed
with SIGKILL as a lost node would be; the router is the real app on a real socket. The
only spy is a recorder around the router's runner client, which says when a call was sent
where (a dead backend cannot tell).
"""

import asyncio
import contextlib
import json
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from nats.aio.client import Client
from spread_backend import Backend, backend_app, spawn

from plnt_common.bus import connect
from plnt_common.bus.provision import ensure_jetstream
from plnt_common.routes import BackendEndpoint, RouteEntry, RouteTarget
from plnt_common.subjects import ROUTES_BUCKET
from plnt_router.adapters.route_watch import RouteWatcher
from plnt_router.app import RUNNER_CLIENT, app_runner, create_app
from plnt_router.settings import RouterSettings
from plnt_router.table import RouteTable

StartApp = Callable[..., Awaitable[str]]
SSE = {"Accept": "text/event-stream"}
KEY = "default.spread"


def spread_entry(*backends: Backend, revision: str = "1.0.0-g1") -> RouteEntry:
    endpoints = [BackendEndpoint(backend=b.name, url=b.url) for b in backends]
    target = RouteTarget(revision=revision, url=backends[0].url, endpoints=endpoints)
    return RouteEntry(namespace="default", name="spread", stable=target)


@dataclass
class Router:
    url: str
    sent: list[tuple[float, str]] = field(default_factory=list)
    """(monotonic time, runner url) of every call the router sent to a runner."""

    def sent_to(self, backend: Backend, *, after: float = 0.0) -> list[float]:
        prefix = backend.url + "/"
        return [at for at, url in self.sent if url.startswith(prefix) and at >= after]


@pytest.fixture
def start_spread_router(start_app: StartApp, table: RouteTable) -> Callable[..., Awaitable[Router]]:
    """The real router over ``table``, its runner client's sends recorded."""

    async def start(**overrides: Any) -> Router:
        defaults: dict[str, Any] = {
            "port": 0,
            "shutdown_grace_s": 1.0,
            "auth": "none",
            "endpoint_probe_interval_s": 0.1,
        }
        settings = RouterSettings(**{**defaults, **overrides})
        app = create_app(settings=settings, table=table)
        client = app[RUNNER_CLIENT]
        router = Router(url="")
        real_post = client.post

        async def recorded_post(**kwargs: Any) -> Any:
            router.sent.append((time.monotonic(), kwargs["url"]))
            return await real_post(**kwargs)

        client.post = recorded_post  # type: ignore[method-assign]
        router.url = await start_app(app, runner=app_runner(app, settings=settings))
        return router

    return start


@pytest.fixture
async def backends() -> AsyncIterator[Callable[..., Awaitable[Backend]]]:
    """``await backends(name, port=0)``: a backend process, killed at the end."""
    started: list[Backend] = []

    async def start(name: str, port: int = 0) -> Backend:
        backend = await spawn(name, port)
        started.append(backend)
        return backend

    yield start
    for backend in started:
        await backend.kill()


@dataclass
class Answer:
    at: float
    status: int
    backend: str


class Load:
    """Sequential calls to the router, one after the other, until stopped."""

    def __init__(self, http: aiohttp.ClientSession, router: Router) -> None:
        self._http = http
        self._url = f"{router.url}/workflows/spread/invoke"
        self.answers: list[Answer] = []
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            async with self._http.post(self._url, json={"n": n}) as response:
                body = await response.read()
                backend = json.loads(body).get("backend", "") if response.status == 200 else ""
                self.answers.append(Answer(time.monotonic(), response.status, backend))

    def by(self, name: str, *, after: float = 0.0) -> int:
        return sum(1 for a in self.answers if a.backend == name and a.at >= after)

    async def until(self, check: Callable[[], bool], *, within_s: float, what: str) -> None:
        deadline = time.monotonic() + within_s
        while not check():
            if self._task.done():
                self._task.result()  # the load itself failed: show why
            last = self.answers[-3:]
            assert time.monotonic() < deadline, f"{what} not seen within {within_s}s: {last}"
            await asyncio.sleep(0.01)

    async def stop(self) -> list[Answer]:
        self._stop.set()
        await self._task
        return self.answers


async def backend_up(http: aiohttp.ClientSession, router: Router) -> dict[str, float]:
    """``plnt_router_backend_up`` of the spread workflow, by backend, from ``/metrics``."""
    async with http.get(f"{router.url}/metrics") as response:
        text = await response.text()
    values = {}
    for line in text.splitlines():
        if line.startswith("plnt_router_backend_up{") and 'workflow="default/spread"' in line:
            backend = line.split('backend="', 1)[1].split('"', 1)[0]
            values[backend] = float(line.rsplit(" ", 1)[1])
    return values


async def test_a_killed_backend_loses_no_call_and_gets_none_within_5_s(
    table: RouteTable,
    start_spread_router: Callable[..., Awaitable[Router]],
    backends: Callable[..., Awaitable[Backend]],
    http: aiohttp.ClientSession,
) -> None:
    east, west = await backends("east"), await backends("west")
    table.put(key=KEY, entry=spread_entry(east, west))
    router = await start_spread_router()
    load = Load(http, router)
    await load.until(
        lambda: load.by("east") >= 10 and load.by("west") >= 10,
        within_s=10,
        what="calls split across both backends",
    )
    killed_at = time.monotonic()
    await east.kill()
    await load.until(
        lambda: load.by("west", after=killed_at) >= 50, within_s=10, what="50 calls after the kill"
    )
    answers = await load.stop()

    assert [a.status for a in answers if a.status != 200] == []
    sent_to_dead = router.sent_to(east, after=killed_at)
    assert sent_to_dead, "no call was sent to the killed backend: the kill came too late"
    assert sent_to_dead[-1] - killed_at < 5.0
    # One failed send took it out (down_after 1); every later call went to west.
    assert len(sent_to_dead) <= 2, f"{len(sent_to_dead)} calls sent to the dead backend"
    assert await backend_up(http, router) == {"east": 0.0, "west": 1.0}


async def test_a_backend_that_returns_gets_its_share_back_gradually(
    table: RouteTable,
    start_spread_router: Callable[..., Awaitable[Router]],
    backends: Callable[..., Awaitable[Backend]],
    http: aiohttp.ClientSession,
) -> None:
    east, west = await backends("east"), await backends("west")
    table.put(key=KEY, entry=spread_entry(east, west))
    ramp_s = 2.0
    router = await start_spread_router(endpoint_ramp_s=ramp_s)
    load = Load(http, router)
    await east.kill()
    await load.until(lambda: load.by("west") >= 20, within_s=10, what="calls to west alone")
    await backends("east", east.port)  # the same address comes back
    await load.until(lambda: load.by("east") >= 1, within_s=10, what="a call to the returned east")
    back_at = next(a.at for a in load.answers if a.backend == "east")
    await load.until(
        lambda: time.monotonic() > back_at + ramp_s + 1.0, within_s=10, what="the end of the ramp"
    )
    answers = await load.stop()

    assert [a.status for a in answers if a.status != 200] == []

    def east_share(start: float, end: float) -> float:
        window = [a for a in answers if back_at + start <= a.at < back_at + end]
        assert len(window) >= 10, f"only {len(window)} calls in {start}-{end}s: load too slow"
        return sum(a.backend == "east" for a in window) / len(window)

    first, settled = east_share(0.0, ramp_s / 4), east_share(ramp_s + 0.2, ramp_s + 1.0)
    assert 0.0 < first < 0.3, f"east took {first:.0%} of calls in the first quarter of its ramp"
    assert settled > 0.4, f"east took {settled:.0%} of calls once its ramp ended"
    assert await backend_up(http, router) == {"east": 1.0, "west": 1.0}


async def test_a_stream_cut_mid_reply_ends_with_an_error_event(
    table: RouteTable,
    start_spread_router: Callable[..., Awaitable[Router]],
    backends: Callable[..., Awaitable[Backend]],
    http: aiohttp.ClientSession,
) -> None:
    east, west = await backends("east"), await backends("west")
    table.put(key=KEY, entry=spread_entry(east, west))
    router = await start_spread_router()
    by_name = {"east": east, "west": west}
    body = {"tokens": 100, "gap_s": 0.05}
    async with http.post(f"{router.url}/workflows/spread/invoke", json=body, headers=SSE) as cut:
        assert cut.status == 200
        first = await asyncio.wait_for(cut.content.readuntil(b"\n\n"), timeout=5)
        assert first.startswith(b"event: token\n")
        assert json.loads(first.split(b"data: ", 1)[1])["backend"] in by_name
        await by_name[json.loads(first.split(b"data: ", 1)[1])["backend"]].kill()
        rest = await asyncio.wait_for(cut.content.read(), timeout=5)
    last_event = rest.strip().split(b"\n\n")[-1]
    assert last_event.startswith(b"event: error\n"), rest[-300:]
    assert json.loads(last_event.split(b"data: ", 1)[1])["error"]["code"] == "upstream_unavailable"


async def test_a_chat_stream_cut_mid_reply_ends_with_an_error_chunk_and_done(
    table: RouteTable,
    start_spread_router: Callable[..., Awaitable[Router]],
    backends: Callable[..., Awaitable[Backend]],
    http: aiohttp.ClientSession,
) -> None:
    east, west = await backends("east"), await backends("west")
    table.put(key=KEY, entry=spread_entry(east, west))
    router = await start_spread_router()
    by_name = {"east": east, "west": west}
    chat = {"model": "spread", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with http.post(f"{router.url}/v1/chat/completions", json=chat) as cut:
        assert cut.status == 200
        seen = b""
        while b'"content": "t0 "' not in seen:  # a reply token: the runner is mid-reply
            seen += await asyncio.wait_for(cut.content.readuntil(b"\n\n"), timeout=5)
        # Which backend streams it: the one that answered the only call sent.
        streaming = next(b for b in by_name.values() if router.sent_to(b))
        await streaming.kill()
        rest = await asyncio.wait_for(cut.content.read(), timeout=5)
    events = rest.strip().split(b"\n\n")
    assert events[-1] == b"data: [DONE]"
    assert b'"error"' in events[-2], rest[-300:]


async def test_a_call_whose_runner_dies_before_answering_is_answered_by_another(
    table: RouteTable,
    start_app: StartApp,
    start_spread_router: Callable[..., Awaitable[Router]],
    backends: Callable[..., Awaitable[Backend]],
    http: aiohttp.ClientSession,
) -> None:
    """The request reached a runner that broke the connection without a word: re-sent once,
    unless ``retry_unanswered`` is off."""

    async def dies(request: web.Request) -> web.Response:
        await request.read()
        assert request.transport is not None
        request.transport.abort()
        return web.Response()

    app = web.Application()
    app.router.add_post("/invoke", dies)
    dying = Backend(name="dying", port=int((await start_app(app)).rsplit(":", 1)[1]))
    west = await backends("west")
    table.put(key=KEY, entry=spread_entry(dying, west))
    router = await start_spread_router()
    url = f"{router.url}/workflows/spread/invoke"
    for n in range(4):
        async with http.post(url, json={"n": n}) as response:
            assert response.status == 200
            assert (await response.json())["backend"] == "west"
    assert len(router.sent_to(dying)) == 1, "one failure takes the endpoint out"

    table.put(key=KEY, entry=spread_entry(dying, west, revision="1.0.0-g2"))
    strict = await start_spread_router(retry_unanswered=False)
    statuses = []
    for n in range(2):
        async with http.post(f"{strict.url}/workflows/spread/invoke", json={"n": n}) as response:
            statuses.append(response.status)
    assert sorted(statuses) == [200, 502]


async def test_a_runner_503_goes_to_another_endpoint_and_a_500_does_not(
    table: RouteTable,
    start_app: StartApp,
    start_spread_router: Callable[..., Awaitable[Router]],
    backends: Callable[..., Awaitable[Backend]],
    http: aiohttp.ClientSession,
) -> None:
    answer = {"status": 503}

    async def invoke(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"error": "x"}, status=answer["status"])

    app = web.Application()
    app.router.add_post("/invoke", invoke)
    odd = Backend(name="odd", port=int((await start_app(app)).rsplit(":", 1)[1]))
    west = await backends("west")
    table.put(key=KEY, entry=spread_entry(odd, west))
    router = await start_spread_router(endpoint_down_after=100)
    url = f"{router.url}/workflows/spread/invoke"
    for n in range(4):  # half the calls go to odd first; its 503s are re-sent to west
        async with http.post(url, json={"n": n}) as response:
            assert response.status == 200
    assert len(router.sent_to(odd)) == 2
    answer["status"] = 500  # the workflow's own failure: the runner works, not re-sent
    statuses = []
    for n in range(4):
        async with http.post(url, json={"n": n}) as response:
            statuses.append(response.status)
    assert sorted(statuses) == [200, 200, 500, 500]


async def test_a_target_with_only_url_is_tried_on_every_call_as_before(
    table: RouteTable,
    start_spread_router: Callable[..., Awaitable[Router]],
    backends: Callable[..., Awaitable[Backend]],
    http: aiohttp.ClientSession,
) -> None:
    """No health tracking, no ramp: the call after the runner returns is served at once."""
    east = await backends("east")
    target = RouteTarget(revision="1.0.0-g1", url=east.url)
    table.put(key=KEY, entry=RouteEntry(namespace="default", name="spread", stable=target))
    router = await start_spread_router(endpoint_ramp_s=60.0)
    url = f"{router.url}/workflows/spread/invoke"
    await east.kill()
    for n in range(3):
        async with http.post(url, json={"n": n}) as response:
            assert response.status == 502
    assert len(router.sent_to(east)) == 3
    await backends("east", east.port)
    async with http.post(url, json={}) as response:
        assert response.status == 200
    assert await backend_up(http, router) == {}


async def test_with_every_endpoint_down_calls_still_try_them_and_reach_one_that_is_back(
    table: RouteTable,
    start_spread_router: Callable[..., Awaitable[Router]],
    backends: Callable[..., Awaitable[Backend]],
    http: aiohttp.ClientSession,
) -> None:
    """The probe may lag (here it never runs in time): a call still gets through."""
    east, west = await backends("east"), await backends("west")
    table.put(key=KEY, entry=spread_entry(east, west))
    router = await start_spread_router(endpoint_probe_interval_s=60.0)
    url = f"{router.url}/workflows/spread/invoke"
    await east.kill()
    await west.kill()
    for n in range(2):
        async with http.post(url, json={"n": n}) as response:
            assert response.status == 502
    await backends("east", east.port)
    async with http.post(url, json={}) as response:
        assert response.status == 200
        assert (await response.json())["backend"] == "east"


async def test_a_url_only_target_answering_503_is_not_re_sent_as_before(
    table: RouteTable,
    start_app: StartApp,
    start_spread_router: Callable[..., Awaitable[Router]],
    http: aiohttp.ClientSession,
) -> None:
    """Only a spread revision re-sends a plain 503; a url-only target re-sends only the
    draining one (to the other revision), as it always did."""

    async def not_ready(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"error": "starting"}, status=503)

    async def works(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"backend": "canary"})

    apps = []
    for handler in (not_ready, works):
        app = web.Application()
        app.router.add_post("/invoke", handler)
        apps.append(await start_app(app))
    stable = RouteTarget(revision="1.0.0-g1", url=apps[0])
    canary = RouteTarget(revision="1.1.0-g2", url=apps[1])
    entry = RouteEntry(
        namespace="default", name="spread", stable=stable, canary=canary, canary_weight=1
    )
    table.put(key=KEY, entry=entry)
    router = await start_spread_router()
    async with http.post(f"{router.url}/workflows/spread/invoke", json={}) as response:
        assert response.status == 503
    assert [url for _, url in router.sent] == [apps[0] + "/invoke"]


async def test_a_hung_runner_is_left_within_seconds_by_its_failed_health_probes(
    table: RouteTable,
    start_spread_router: Callable[..., Awaitable[Router]],
    backends: Callable[..., Awaitable[Backend]],
    http: aiohttp.ClientSession,
) -> None:
    """A runner that accepts connections but answers nothing (stopped here): the calls give
    nothing to count until their timeout, so the probes of up endpoints take it out."""
    east, west = await backends("east"), await backends("west")
    assert east.process is not None
    table.put(key=KEY, entry=spread_entry(east, west))
    router = await start_spread_router(
        endpoint_probe_interval_s=0.2, endpoint_probe_timeout_s=0.3, upstream_timeout_s=30
    )
    url = f"{router.url}/workflows/spread/invoke"

    async def call(n: int) -> int:
        async with http.post(url, json={"n": n}) as response:
            await response.read()
            return response.status

    east.process.send_signal(signal.SIGSTOP)
    frozen_at = time.monotonic()
    calls = []
    try:
        for n in range(60):  # one call every 50 ms for 3 s, none waiting on another
            calls.append(asyncio.create_task(call(n)))
            await asyncio.sleep(0.05)
        sent_to_hung = router.sent_to(east, after=frozen_at)
        assert sent_to_hung, "no call was sent to the hung backend: it was left too early"
        assert sent_to_hung[-1] - frozen_at < 2.0, "the hung backend kept getting calls"
        assert await backend_up(http, router) == {"east": 0.0, "west": 1.0}
    finally:
        east.process.send_signal(signal.SIGCONT)
    # the calls it took wake with it and are answered; none was lost
    assert await asyncio.gather(*calls) == [200] * 60


async def test_an_endpoint_that_never_accepts_is_left_after_the_connect_timeout(
    table: RouteTable,
    start_spread_router: Callable[..., Awaitable[Router]],
    backends: Callable[..., Awaitable[Backend]],
    http: aiohttp.ClientSession,
) -> None:
    """A backend whose host drops connection attempts (a full accept queue here): the call
    goes to the other endpoint after ``connect_timeout_s``, not ``upstream_timeout_s``."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(0)  # never accepted: once the queue is full, SYNs are dropped
        port = silent.getsockname()[1]
        fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        try:
            west = await backends("west")
            table.put(key=KEY, entry=spread_entry(Backend(name="silent", port=port), west))
            router = await start_spread_router(connect_timeout_s=0.3, upstream_timeout_s=4)
            url = f"{router.url}/workflows/spread/invoke"
            started = time.monotonic()
            for n in range(3):
                async with http.post(url, json={"n": n}) as response:
                    assert response.status == 200
                    assert (await response.json())["backend"] == "west"
            assert time.monotonic() - started < 3.0, "waited the call timeout, not the connect one"
            assert [url for _, url in router.sent].count(f"http://127.0.0.1:{port}/invoke") == 1
        finally:
            for filler in fillers:
                filler.close()


async def test_endpoints_written_to_the_routes_bucket_split_calls_and_follow_serving(
    nc: Client,
    nats_url: str,
    table: RouteTable,
    start_app: StartApp,
    start_spread_router: Callable[..., Awaitable[Router]],
    http: aiohttp.ClientSession,
    wait_until: Callable[..., Awaitable[None]],
) -> None:
    """The route as the promoter writes it (JSON in ``plnt-routes``), read by the router's
    own watch: both endpoints share the calls, and one the route marks not serving gets
    none (no health check involved)."""
    east, west = [
        Backend(name=name, port=int((await start_app(backend_app(name))).rsplit(":", 1)[1]))
        for name in ("east", "west")
    ]
    js = nc.jetstream()
    await ensure_jetstream(js)
    kv = await js.key_value(ROUTES_BUCKET)
    await kv.put(KEY, spread_entry(east, west).model_dump_json().encode())
    watcher_nc = await connect(nats_url, name="router-under-test")
    watcher = RouteWatcher(nc=watcher_nc, table=table, retry_s=0.1, check_s=0.2)
    watcher.start()
    try:
        await wait_until(lambda: table.get(KEY) is not None, what="the route loaded")
        router = await start_spread_router()
        url = f"{router.url}/workflows/spread/invoke"

        async def served_by(calls: int) -> list[str]:
            names = []
            for n in range(calls):
                async with http.post(url, json={"n": n}) as response:
                    assert response.status == 200
                    names.append((await response.json())["backend"])
            return names

        assert sorted(await served_by(4)) == ["east", "east", "west", "west"]
        entry = spread_entry(east, west)
        assert entry.stable is not None
        east_down = entry.stable.endpoints[0].model_copy(update={"serving": False})
        stable = entry.stable.model_copy(
            update={"endpoints": [east_down, *entry.stable.endpoints[1:]]}
        )
        await kv.put(KEY, entry.model_copy(update={"stable": stable}).model_dump_json().encode())
        await wait_until(
            lambda: len(table.get(KEY).serving_endpoints.get("1.0.0-g1", ())) == 1,  # type: ignore[union-attr]
            what="east marked not serving",
        )
        assert await served_by(4) == ["west"] * 4
        deadline = time.monotonic() + 5
        while (up := await backend_up(http, router)) != {"east": 0.0, "west": 1.0}:
            assert time.monotonic() < deadline, f"plnt_router_backend_up stayed {up}"
            await asyncio.sleep(0.05)
    finally:
        await watcher.stop()
        await watcher_nc.close()
