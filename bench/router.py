"""Router figures: the real router process against nginx and the backend called directly.

Set-up, all on loopback: a nats-server and the fast backend (``bench.backends``, two
ports: revisions ``stable`` and ``canary``) on the load core; the router
(``python -m plnt_router``, routes put into ``plnt-routes`` as ``RouteEntry`` JSON) and
nginx (one worker) on the system-under-test core; the load from this process or wrk on
the load core. Each latency figure is measured in alternating rounds (direct, router,
nginx, then again) so a burst of outside load spreads over all three.

Figures: canary split accuracy, added latency at a fixed rate (p50/p99), the same with
shadow traffic on (every call mirrored), saturation throughput, SSE time to first chunk
and buffering, upstream connection reuse, the OpenAI-compatible endpoints, and the
concurrency limit with its queue-depth gauge.
"""

import asyncio
import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench import loadgen
from bench.backends import SSE_GAP_S
from bench.loadgen import Reply, Target
from bench.nginx import INSTALL_HINT, Nginx, nginx_binary
from bench.procs import LOAD_CPU, SUT_CPU, Child, pin, unpin
from bench.stats import percentile
from bench.table import Row
from bench.wrk import saturate, wrk_binary
from plnt_common.bus import connect
from plnt_common.bus.provision import ensure_jetstream
from plnt_common.nats_server import NatsServer, free_port, free_ports
from plnt_common.routes import RouteEntry, RouteTarget, route_key
from plnt_common.shadow_pairs import ShadowRoute
from plnt_common.subjects import ROUTES_BUCKET

BODY = b'{"review": "Great service but slow parking"}'
CANARY_PERCENT = 5
FLOOD_LIMITS = {"max_in_flight": 4, "max_queue": 8}
FLOOD_CALLS = 40
_QUEUE_DEPTH = re.compile(rb'^plnt_queue_depth\{component="router"\} ([\d.]+)$', re.M)
SHADOW_PERCENT, SHADOW_NOISE_PERCENT = 20, 5
_SHADOW_SERIES = re.compile(
    rb'^plnt_router_shadow_calls_total\{[^}]*outcome="(\w+)"[^}]*\} ([\d.e+]+)$',
    re.M,
)


@dataclass(frozen=True)
class RouterBench:
    """How much load each router figure gets."""

    rate: float = 500.0
    seconds: float = 10.0
    rounds: int = 4
    split_calls: int = 10_000
    wrk_seconds: int = 4
    wrk_rounds: int = 3
    wrk_connections: int = 64
    sse_samples: int = 300


@dataclass
class _Stack:
    """The processes of one router benchmark, and the URLs the load is sent to."""

    tmp: Path
    nats_url: str
    stable_url: str
    canary_url: str
    router: Child
    nginx: Nginx | None

    def invoke(self, via: str, name: str = "bench") -> str:
        """The URL that invokes workflow ``name`` through ``via``: direct, router or nginx."""
        if via == "direct":
            return f"{self.stable_url}/invoke"
        base = self.router.url if via == "router" else self._nginx_url
        return f"{base}/workflows/{name}/invoke"

    @property
    def _nginx_url(self) -> str:
        assert self.nginx is not None
        return self.nginx.url


async def router_figures(tmp: Path, bench: RouterBench) -> list[Row]:
    """Every router row; starts and stops its own processes."""
    with _stack(tmp) as stack:
        await _put_routes(stack)
        await _wait_until_served(stack.invoke("router"))
        await _wait_until_served(stack.invoke("router", "split"))
        pin(0, LOAD_CPU)
        try:
            rows = [await _split(stack, bench)]
            rows += await _latency(stack, bench)
            rows += await _shadow_latency(stack, bench)
            rows.append(_throughput(stack, bench))
            rows += await _sse(stack, bench)
            rows.append(await _openai(stack))
            rows.append(await _limit(stack))
        finally:
            unpin()
    return rows


@contextlib.contextmanager
def _stack(tmp: Path) -> Iterator[_Stack]:
    nats = NatsServer(store_dir=tmp / "nats", port=free_port()).start()
    try:
        if nats.process is not None:
            pin(nats.process.pid, LOAD_CPU)
        stable_port, canary_port = free_ports(2)
        backend = Child.python(
            "bench.backends",
            "--serve",
            f"{stable_port}=stable",
            "--serve",
            f"{canary_port}=canary",
            cpu=LOAD_CPU,
            log=tmp / "backend.log",
        )
        with backend, _router(tmp, nats.url, "router") as router:
            nginx = Nginx(tmp=tmp / "nginx", backend_port=stable_port) if nginx_binary() else None
            with nginx or contextlib.nullcontext():
                yield _Stack(
                    tmp=tmp,
                    nats_url=nats.url,
                    stable_url=f"http://127.0.0.1:{stable_port}",
                    canary_url=f"http://127.0.0.1:{canary_port}",
                    router=router,
                    nginx=nginx,
                )
    finally:
        nats.stop()


def _router(tmp: Path, nats_url: str, name: str, **limits: int) -> Child:
    env = {
        "PLNT_NATS_URL": nats_url,
        "PLNT_ROUTER_HOST": "127.0.0.1",
        "PLNT_ROUTER_PORT": str(free_port()),
        "PLNT_ROUTER_AUTH": "none",
        "PLNT_LOG_LEVEL": "warning",
        **{f"PLNT_ROUTER_{key.upper()}": str(value) for key, value in limits.items()},
    }
    return Child.python("plnt_router", cpu=SUT_CPU, log=tmp / f"{name}.log", env=env)


async def _put_routes(stack: _Stack) -> None:
    nc = await connect(stack.nats_url, name="bench-routes")
    try:
        js = nc.jetstream()
        await ensure_jetstream(js)
        kv = await js.key_value(ROUTES_BUCKET)
        stable = RouteTarget(revision="stable", url=stack.stable_url)
        canary = RouteTarget(revision="canary", url=stack.canary_url)
        entries = [
            RouteEntry(namespace="default", name="bench", stable=stable),
            RouteEntry(
                namespace="default",
                name="split",
                stable=stable,
                canary=canary,
                canary_weight=CANARY_PERCENT,
            ),
            # What the promoter writes while a run is Shadowing: canary at weight 0.
            RouteEntry(
                namespace="default",
                name="shadowed",
                stable=stable,
                canary=canary,
                shadow=ShadowRoute(
                    saga_id="bench",
                    percent=SHADOW_PERCENT,
                    noise_percent=SHADOW_NOISE_PERCENT,
                ),
            ),
        ]
        for entry in entries:
            await kv.put(route_key(entry.namespace, entry.name), entry.model_dump_json().encode())
    finally:
        await nc.close()


async def _wait_until_served(url: str, timeout_s: float = 20.0) -> None:
    target = Target.post(url, BODY)
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        with contextlib.suppress(OSError):
            (reply,) = await loadgen.sequential(target, count=1, warmup=0)
            if reply.status == 200:
                return
        if asyncio.get_running_loop().time() > deadline:
            raise RuntimeError(f"{url} does not answer 200 after {timeout_s:g}s")
        await asyncio.sleep(0.1)


async def _backend_connections(stack: _Stack) -> int:
    (reply,) = await loadgen.sequential(Target.get(f"{stack.stable_url}/stats"), count=1, warmup=0)
    return int(json.loads(reply.body)["connections"])


def _ms(replies: list[Reply], fraction: float, *, first_chunk: bool = False) -> float:
    values = [r.first_chunk if first_chunk else r.latency for r in replies]
    return percentile(values, fraction) * 1000


def _check_ok(replies: list[Reply], what: str) -> None:
    bad = [r.status for r in replies if r.status != 200]
    if bad:
        raise RuntimeError(f"{what}: {len(bad)} of {len(replies)} answers were not 200: {bad[:5]}")


async def _split(stack: _Stack, bench: RouterBench) -> Row:
    target = Target.post(stack.invoke("router", "split"), BODY)
    replies = await loadgen.burst(target, total=bench.split_calls, concurrency=16)
    _check_ok(replies, "split")
    canary = sum(1 for r in replies if r.headers.get("x-plnt-revision") == "canary")
    share = 100 * canary / len(replies)
    error = abs(share - CANARY_PERCENT)
    return Row.check(
        f"canary split, {len(replies):,} calls at {CANARY_PERCENT}% (x-plnt-revision)",
        f"{canary} canary = {share:.2f}% (error {error:.2f} pp)",
        f"{CANARY_PERCENT}% configured",
        "error ≤ 1 pp",
        error <= 1.0,
    )


async def _latency(stack: _Stack, bench: RouterBench) -> list[Row]:
    vias = ["direct", "router"] + (["nginx"] if stack.nginx else [])
    replies: dict[str, list[Reply]] = {via: [] for via in vias}
    reused_calls = reused_connections = 0
    per_round = bench.seconds / bench.rounds
    for _ in range(bench.rounds):
        for via in vias:
            before = await _backend_connections(stack)
            got = await loadgen.paced(
                Target.post(stack.invoke(via), BODY),
                rate=bench.rate,
                seconds=per_round,
                warmup_s=0.5,
            )
            _check_ok(got, f"latency via {via}")
            replies[via] += got
            if via == "router":
                reused_connections += await _backend_connections(stack) - before - 1
                reused_calls += len(got)
    direct, router = replies["direct"], replies["router"]
    nginx = replies.get("nginx")
    rows = []
    for label, fraction, limit in (("p50", 0.5, 1.0), ("p99", 0.99, 5.0)):
        d, r = _ms(direct, fraction), _ms(router, fraction)
        reference = (
            f"nginx adds {_ms(nginx, fraction) - d:.3f} ms" if nginx else "nginx: not installed"
        )
        rows.append(
            Row.check(
                f"added latency {label} at {bench.rate:g} req/s, open loop ({len(router):,} calls)",
                f"{r - d:.3f} ms (router {r:.3f}, direct {d:.3f})",
                reference,
                f"≤ {limit:g} ms",
                r - d <= limit,
            )
        )
    rows.append(
        Row.check(
            "keep-alive upstream pool",
            f"{max(reused_connections, 0)} new upstream connections for {reused_calls:,} calls",
            "one connection per concurrent call at most",
            "connections reused",
            reused_connections <= bench.wrk_connections,
        )
    )
    return rows


async def _shadow_latency(stack: _Stack, bench: RouterBench) -> list[Row]:
    """The caller's latency with every call mirrored, beside the same router's without
    shadow, in alternating rounds: the mirror runs after the answer, so it must not show."""
    routes = {"off": "bench", "on": "shadowed"}
    replies: dict[str, list[Reply]] = {"off": [], "on": []}
    per_round = bench.seconds / bench.rounds
    for _ in range(bench.rounds):
        for state, name in routes.items():
            got = await loadgen.paced(
                Target.post(stack.invoke("router", name), BODY),
                rate=bench.rate,
                seconds=per_round,
                warmup_s=0.5,
            )
            _check_ok(got, f"latency with shadow {state}")
            replies[state] += got
    (scrape,) = await loadgen.sequential(
        Target.get(f"{stack.router.url}/metrics"), count=1, warmup=0
    )
    outcomes: dict[str, float] = {}
    for outcome, value in _SHADOW_SERIES.findall(scrape.body):
        key = outcome.decode()
        outcomes[key] = outcomes.get(key, 0.0) + float(value)
    mirrored = ", ".join(f"{int(v):,} {k}" for k, v in sorted(outcomes.items())) or "none"
    rows = []
    for label, fraction, limit in (("p50", 0.5, 0.5), ("p99", 0.99, 2.0)):
        off, on = _ms(replies["off"], fraction), _ms(replies["on"], fraction)
        rows.append(
            Row.check(
                f"added latency {label} with shadow on ({SHADOW_PERCENT}% mirrored, "
                f"{SHADOW_NOISE_PERCENT}% noise) at {bench.rate:g} req/s",
                f"{on - off:+.3f} ms (shadow on {on:.3f}, off {off:.3f})",
                f"mirrors: {mirrored}",
                f"≤ {limit:g} ms over shadow off",
                on - off <= limit,
            )
        )
    return rows


def _throughput(stack: _Stack, bench: RouterBench) -> Row:
    """Best of ``wrk_rounds`` alternating wrk runs per target: outside load only ever
    lowers a throughput, so the best run is the one least disturbed."""
    figure = (
        f"saturation throughput (wrk, {bench.wrk_connections} connections, "
        f"best of {bench.wrk_rounds} alternating {bench.wrk_seconds} s runs)"
    )
    if wrk_binary() is None:
        return Row.skipped(figure, f"wrk not installed: {INSTALL_HINT}", "≥ 20% of nginx")
    vias = ["direct", "router"] + (["nginx"] if stack.nginx else [])
    best = dict.fromkeys(vias, 0.0)
    for _ in range(bench.wrk_rounds):
        for via in vias:
            result = saturate(
                stack.invoke(via),
                tmp=stack.tmp,
                seconds=bench.wrk_seconds,
                connections=bench.wrk_connections,
                warmup_s=1,
            )
            if result.non_2xx or result.errors:
                raise RuntimeError(f"wrk via {via}: {result}")
            best[via] = max(best[via], result.requests_per_s)
    if stack.nginx is None:
        return Row.skipped(
            figure,
            f"nginx not installed ({INSTALL_HINT}); router {best['router']:,.0f} req/s",
            "≥ 20% of nginx",
        )
    ratio = best["router"] / best["nginx"]
    return Row.check(
        figure,
        f"{best['router']:,.0f} req/s = {ratio:.0%} of nginx",
        f"nginx {best['nginx']:,.0f} req/s; backend direct {best['direct']:,.0f}",
        "≥ 20% of nginx",
        ratio >= 0.20,
    )


async def _sse(stack: _Stack, bench: RouterBench) -> list[Row]:
    vias = ["direct", "router"] + (["nginx"] if stack.nginx else [])
    replies = {}
    for via in vias:
        target = Target.post(stack.invoke(via), BODY, headers={"accept": "text/event-stream"})
        got = await loadgen.sequential(target, count=bench.sse_samples, warmup=20)
        _check_ok(got, f"SSE via {via}")
        replies[via] = got
    direct = _ms(replies["direct"], 0.5, first_chunk=True)
    router = _ms(replies["router"], 0.5, first_chunk=True)
    reference = (
        f"nginx +{_ms(replies['nginx'], 0.5, first_chunk=True) - direct:.3f} ms"
        if "nginx" in replies
        else "nginx: not installed"
    )
    gap_ms = SSE_GAP_S * 1000
    router_p99 = _ms(replies["router"], 0.99, first_chunk=True)
    router_done = _ms(replies["router"], 0.5)
    return [
        Row.check(
            f"SSE time to first chunk, p50 of {bench.sse_samples} streams",
            f"+{router - direct:.3f} ms (router {router:.3f}, direct {direct:.3f})",
            reference,
            "≤ 2 ms over direct",
            router - direct <= 2.0,
        ),
        Row.check(
            "SSE pass-through without buffering",
            f"first event at {router:.3f} ms (p99 {router_p99:.3f}), last at {router_done:.1f} ms",
            f"backend sends the second event {gap_ms:g} ms after the first",
            f"first event arrives before the second is sent (< {gap_ms:g} ms)",
            router_p99 < gap_ms,
        ),
    ]


async def _openai(stack: _Stack) -> Row:
    base = stack.router.url
    chat = {"model": "bench", "messages": [{"role": "user", "content": "hello"}]}
    (plain,) = await loadgen.sequential(
        Target.post(f"{base}/v1/chat/completions", json.dumps(chat).encode()), count=1, warmup=0
    )
    (streamed,) = await loadgen.sequential(
        Target.post(f"{base}/v1/chat/completions", json.dumps({**chat, "stream": True}).encode()),
        count=1,
        warmup=0,
    )
    (models,) = await loadgen.sequential(Target.get(f"{base}/v1/models"), count=1, warmup=0)
    problems = []
    answer = json.loads(plain.body) if plain.status == 200 else {}
    if answer.get("object") != "chat.completion" or not answer["choices"][0]["message"]["content"]:
        problems.append(f"completion: {plain.status} {plain.body[:120]!r}")
    events = [line for line in streamed.body.decode().splitlines() if line.startswith("data: ")]
    if not events or events[-1] != "data: [DONE]" or "chat.completion.chunk" not in events[0]:
        problems.append(f"stream: {streamed.body[:120]!r}")
    ids = [m["id"] for m in json.loads(models.body).get("data", [])] if models.status == 200 else []
    if "bench" not in ids:
        problems.append(f"models: {ids}")
    return Row.check(
        "OpenAI endpoints: chat completion, streamed, /v1/models",
        "; ".join(problems)
        or f"chat.completion; {len(events) - 1} chunks + [DONE]; models {sorted(ids)}",
        "OpenAI chat-completions shapes",
        "same shapes",
        not problems,
    )


async def _limit(stack: _Stack) -> Row:
    with _router(stack.tmp, stack.nats_url, "router-limited", **FLOOD_LIMITS) as limited:
        invoke = f"{limited.url}/workflows/bench/invoke"
        await _wait_until_served(invoke)
        slow = Target.post(invoke, b'{"delay_ms": 200}')
        metrics = Target.get(f"{limited.url}/metrics")
        peak = 0.0
        flood = asyncio.create_task(loadgen.burst(slow, total=FLOOD_CALLS, concurrency=FLOOD_CALLS))
        while not flood.done():
            (scrape,) = await loadgen.sequential(metrics, count=1, warmup=0)
            found = _QUEUE_DEPTH.search(scrape.body)
            peak = max(peak, float(found.group(1)) if found else 0.0)
            await asyncio.sleep(0.01)
        replies = flood.result()
    served = sum(1 for r in replies if r.status == 200)
    refused = sum(1 for r in replies if r.status == 429 and "retry-after" in r.headers)
    capacity = FLOOD_LIMITS["max_in_flight"] + FLOOD_LIMITS["max_queue"]
    return Row.check(
        f"concurrency limit: {FLOOD_CALLS} calls of 200 ms at once, "
        f"max_in_flight {FLOOD_LIMITS['max_in_flight']}, max_queue {FLOOD_LIMITS['max_queue']}",
        f"{served} served, {refused} got 429 + Retry-After; queue depth peaked at {peak:g}",
        f"{capacity} admitted, the rest refused",
        "429 beyond the queue; gauge shows it",
        served + refused == FLOOD_CALLS and refused > 0 and 0 < peak <= FLOOD_LIMITS["max_queue"],
    )
