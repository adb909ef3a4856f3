"""The ``FiguresSource`` contract, run against both adapters on real processes.

A real nats-server, a real router process serving a route from ``plnt-routes``, and two
real runners (the runner app on real sockets): the stable revision answers (offline LLM,
with prices, so each answer carries its tokens and cost), the canary's workflow fails on
its last step (a 500). The bus adapter reads what the router publishes; the Prometheus
adapter reads a real Prometheus scraping the router's ``/metrics``.
"""

import asyncio
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import pytest
import yaml
from aiohttp import web
from nats.aio.client import Client

from plnt_common.bus import connect
from plnt_common.bus.provision import ensure_jetstream
from plnt_common.figures import (
    FiguresUnavailable,
    RevisionTotals,
    RouterFigures,
    window_by_revision,
)
from plnt_common.nats_server import free_port, free_ports
from plnt_common.routes import RouteEntry, RouteTarget, route_key
from plnt_common.subjects import ROUTES_BUCKET, router_figures_subject
from plnt_promoter.adapters.figures_bus import BusFigures
from plnt_promoter.adapters.figures_prometheus import PrometheusFigures
from plnt_promoter.adapters.figures_source import open_figures
from plnt_promoter.settings import PromoterSettings
from plnt_runner.app import create_app as create_runner_app
from plnt_runner.settings import RunnerSettings

INPUT_PRICE, OUTPUT_PRICE = 3.0, 15.0
STABLE, CANARY = "figures-r1", "figures-r2"
WORKFLOW = "reviews"


class Source(Protocol):
    async def totals(self, *, namespace: str, name: str) -> Mapping[str, RevisionTotals]: ...
    async def close(self) -> None: ...


def workflow_file(tmp_path: Path, *, failing: bool) -> Path:
    steps: list[dict[str, Any]] = [{"id": "draft", "tool": "llm.generate"}]
    if failing:  # nothing listens there: the step fails and the runner answers 500
        url = f"http://127.0.0.1:{free_port()}/hook"
        steps.append(
            {"id": "notify", "tool": "http.request", "deps": ["draft"], "with": {"url": url}}
        )
    document = {
        "apiVersion": "microagents.dev/v1",
        "kind": "Workflow",
        "metadata": {"name": WORKFLOW, "version": "1.0.0"},
        "spec": {"runtime": {"image": "example/runner:1", "entrypoint": "run"}, "steps": steps},
    }
    path = tmp_path / ("failing.yaml" if failing else "workflow.yaml")
    path.write_text(yaml.safe_dump(document))
    return path


class Processes:
    """Child processes of one test, killed at its end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.children: list[asyncio.subprocess.Process] = []

    async def spawn(self, module: str, env: dict[str, str]) -> str:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PLNT_")}
        with (self.tmp_path / f"{module}.log").open("ab") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", module, env={**base, **env},
                stdout=asyncio.subprocess.PIPE, stderr=log,
            )  # fmt: skip
        self.children.append(process)
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), timeout=20)).decode()
        match = re.fullmatch(r"listening on (http://\S+)\n", line)
        assert match, f"{module} said {line!r}"
        return match.group(1)

    async def stop(self, process: asyncio.subprocess.Process) -> None:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(process.wait(), timeout=15)

    async def close(self) -> None:
        for process in self.children:
            if process.returncode is None:
                process.kill()
                await process.wait()


class Stack:
    """The router and its two runners, with a client that calls through the router."""

    def __init__(self, processes: Processes, nats_url: str, router_port: int) -> None:
        self.processes = processes
        self.nats_url = nats_url
        self.router_port = router_port
        self.router = f"http://127.0.0.1:{router_port}"
        self.http = aiohttp.ClientSession()

    async def start_router(self) -> None:
        env = {
            "PLNT_NATS_URL": self.nats_url,
            "PLNT_ROUTER_PORT": str(self.router_port),
            "PLNT_ROUTER_AUTH": "none",
            "PLNT_ROUTER_FIGURES_INTERVAL_S": "0.2",
        }
        await self.processes.spawn("plnt_router", env)
        for _ in range(200):
            async with self.http.get(f"{self.router}/readyz") as response:
                if response.status == 200:
                    return
            await asyncio.sleep(0.05)
        raise AssertionError("router never read its routes")

    async def stop_router(self) -> None:
        await self.processes.stop(self.processes.children[-1])

    async def invoke(self, count: int) -> dict[str, RevisionTotals]:
        """Call ``count`` times; what each revision answered, as a source should count it."""
        expected: dict[str, RevisionTotals] = {}
        for _ in range(count):
            async with self.http.post(
                f"{self.router}/workflows/{WORKFLOW}/invoke", json={"review": "lovely food"}
            ) as response:
                revision = response.headers["x-plnt-revision"]
                body = await response.json()
            usage = body.get("usage") or {"prompt_tokens": 0, "completion_tokens": 0}
            prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
            call = RevisionTotals(
                invocations=1,
                errors=int(response.status >= 500),
                tokens=prompt + completion,
                cost_usd=(prompt * INPUT_PRICE + completion * OUTPUT_PRICE) / 1e6,
            )
            expected[revision] = expected[revision].plus(call) if revision in expected else call
        return expected


@pytest.fixture
async def stack(tmp_path: Path, nats_url: str, nc: Client) -> AsyncIterator[Stack]:
    processes = Processes(tmp_path)
    urls = []
    runners = []
    for revision, failing in ((STABLE, False), (CANARY, True)):
        settings = RunnerSettings(
            workflow_file=workflow_file(tmp_path, failing=failing),
            revision=revision,
            cache_size=0,
            llm_input_price_per_mtok_usd=INPUT_PRICE,
            llm_output_price_per_mtok_usd=OUTPUT_PRICE,
        )
        # The runner app on a real socket, in this process: a process each would add
        # seconds of start-up per test for nothing the router could tell apart.
        runner = web.AppRunner(create_runner_app(settings), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{runner.addresses[0][1]}")
    js = nc.jetstream()
    await ensure_jetstream(js)
    kv = await js.key_value(ROUTES_BUCKET)
    entry = RouteEntry(
        namespace="default",
        name=WORKFLOW,
        stable=RouteTarget(revision=STABLE, url=urls[0]),
        canary=RouteTarget(revision=CANARY, url=urls[1]),
        canary_weight=30,
    )
    await kv.put(route_key("default", WORKFLOW), entry.model_dump_json().encode())
    stack = Stack(processes, nats_url, free_port())
    await stack.start_router()
    yield stack
    await stack.http.close()
    await processes.close()
    for runner in runners:
        await runner.cleanup()


@asynccontextmanager
async def prometheus(tmp_path: Path, stack: Stack) -> AsyncIterator[str]:
    """A real Prometheus scraping the router every 100 ms; its base URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus binary is not installed (apt-get install prometheus)")
    port = free_port()
    config = {
        "global": {"scrape_interval": "100ms", "scrape_timeout": "100ms"},
        "scrape_configs": [
            {
                "job_name": "router",
                "static_configs": [{"targets": [f"127.0.0.1:{stack.router_port}"]}],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    with (tmp_path / "prometheus.log").open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            stdout=log,
            stderr=log,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(300):
                try:
                    async with http.get(f"{url}/-/ready") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("prometheus never became ready")
        yield url
    finally:
        process.kill()
        await process.wait()


@pytest.fixture(params=["bus", "prometheus"])
async def source(
    request: pytest.FixtureRequest, tmp_path: Path, stack: Stack, nc: Client
) -> AsyncIterator[Source]:
    async with AsyncExitStack() as resources:
        if request.param == "prometheus":
            url = await resources.enter_async_context(prometheus(tmp_path, stack))
            settings = PromoterSettings(figures="prometheus", prometheus_url=url)
        else:
            settings = PromoterSettings(figures="bus")
        opened = await open_figures(settings=settings, nc=nc)
        resources.push_async_callback(opened.close)
        yield opened


async def reading(
    source: Source, check: Callable[[Mapping[str, RevisionTotals]], bool], *, within_s: float = 10
) -> Mapping[str, RevisionTotals]:
    """The first reading that passes ``check`` (sources lag calls by a publish or scrape)."""
    deadline = time.monotonic() + within_s
    while True:
        totals = await source.totals(namespace="default", name=WORKFLOW)
        if check(totals):
            return totals
        if time.monotonic() > deadline:
            raise AssertionError(f"last reading: {totals}")
        await asyncio.sleep(0.1)


def counts(totals: Mapping[str, RevisionTotals]) -> dict[str, RevisionTotals]:
    """Totals without latency buckets, which the test cannot know call by call."""
    return {
        revision: t.model_copy(update={"latency_buckets": ()}) for revision, t in totals.items()
    }


def approx_equal(
    totals: Mapping[str, RevisionTotals], expected: Mapping[str, RevisionTotals]
) -> bool:
    actual = counts(totals)
    return actual.keys() == expected.keys() and all(
        (a.invocations, a.errors, a.tokens) == (e.invocations, e.errors, e.tokens)
        and a.cost_usd == pytest.approx(e.cost_usd)
        for a, e in ((actual[r], expected[r]) for r in expected)
    )  # fmt: skip


class TestFiguresSourceContract:
    async def test_every_call_is_counted_by_revision_with_5xx_as_errors_tokens_and_cost(
        self, stack: Stack, source: Source
    ) -> None:
        assert await source.totals(namespace="default", name=WORKFLOW) == {}, "nothing served"
        expected = await stack.invoke(14)
        assert set(expected) == {STABLE, CANARY}, "both revisions should have served"
        assert expected[CANARY].errors == expected[CANARY].invocations > 0
        assert expected[STABLE].tokens > 0 and expected[STABLE].errors == 0
        totals = await reading(source, lambda t: approx_equal(t, expected))
        for revision, revision_totals in totals.items():
            bounds = dict(revision_totals.latency_buckets)
            assert bounds[float("inf")] == expected[revision].invocations
            assert bounds[2.5] <= bounds[3.0]  # the finer buckets of the p95 budgets

    async def test_the_difference_of_two_readings_is_the_calls_in_between(
        self, stack: Stack, source: Source
    ) -> None:
        done = await stack.invoke(5)
        first = await reading(source, lambda t: approx_equal(t, done))
        more = await stack.invoke(7)
        later = await reading(source, lambda t: sum(x.invocations for x in t.values()) == 12)
        windows = window_by_revision(later, first)
        assert approx_equal({r: w for r, w in windows.items() if w.invocations}, more)

    async def test_a_restarted_router_starts_from_zero_and_the_totals_still_only_grow(
        self, stack: Stack, source: Source
    ) -> None:
        before = await stack.invoke(6)
        await reading(source, lambda t: approx_equal(t, before))
        await stack.stop_router()
        await stack.start_router()  # same port: Prometheus sees the same instance reset
        after = await stack.invoke(3)
        total = sum(t.invocations for t in before.values()) + 3
        totals = await reading(source, lambda t: sum(x.invocations for x in t.values()) == total)
        for revision in set(before) | set(after):
            merged = before.get(revision, RevisionTotals()).plus(
                after.get(revision, RevisionTotals())
            )
            assert totals[revision].invocations == merged.invocations


async def test_the_bus_sources_first_reading_waits_until_every_router_has_published(
    nc: Client,
) -> None:
    figures = BusFigures(nc=nc, settle_s=1.0)
    await figures.start()
    published = RouterFigures(
        router="router-a",
        namespace="default",
        name=WORKFLOW,
        revisions={STABLE: RevisionTotals(invocations=40)},
    )

    async def publish_later() -> None:
        await asyncio.sleep(0.3)  # a router whose turn comes after the reader started
        await nc.publish(
            router_figures_subject("default", WORKFLOW), published.model_dump_json().encode()
        )

    started = time.monotonic()
    later = asyncio.create_task(publish_later())
    totals = await figures.totals(namespace="default", name=WORKFLOW)
    await later
    assert time.monotonic() - started >= 0.9
    assert totals == {STABLE: RevisionTotals(invocations=40)}
    await figures.close()


async def test_the_bus_source_says_it_is_unreachable_when_the_bus_is_down(nats_url: str) -> None:
    nc = await connect(nats_url, name="figures-reader")
    figures = BusFigures(nc=nc, settle_s=0)
    await figures.start()
    await nc.close()
    with pytest.raises(FiguresUnavailable, match="bus is unreachable"):
        await figures.totals(namespace="default", name=WORKFLOW)


async def test_the_prometheus_source_names_the_url_it_could_not_reach() -> None:
    url = f"http://127.0.0.1:{free_ports(1)[0]}"
    figures = PrometheusFigures(url=url, timeout_s=2)
    try:
        with pytest.raises(FiguresUnavailable, match=re.escape(f"Prometheus at {url}")):
            await figures.totals(namespace="default", name=WORKFLOW)
    finally:
        await figures.close()


def test_prometheus_figures_without_a_url_is_one_clear_settings_error() -> None:
    with pytest.raises(ValueError, match="needs PLNT_PROMOTER_PROMETHEUS_URL"):
        PromoterSettings(figures="prometheus")
