"""A cluster whose API goes silent: the Helm observer keeps its releases as they were,
then asks each runner itself, and reports the ones that do not answer lost
(``BackendUnreachable``) while the ones that answer keep serving.

The observer runs against in-memory versions of its own ports (targets, connector, store)
and a hand-driven clock; the runners are real HTTP servers asked by the real probe.
"""

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from installer_helm_support import StaticTargets, remote_backend

from plnt_common.errors import KubernetesUnavailable
from plnt_common.releases import ObservedRelease, ReleasePhase
from plnt_common.resources import KubernetesTarget
from plnt_installer.adapters.runner_probe import HttpRunnerProbe
from plnt_installer.helm_observer import HelmObserver, RunnerProbe, ServiceState

AFTER_S = 15.0
NS = "agents"


@dataclass
class Cluster:
    """One PlntBackend's API: its runner Services, or silence."""

    services: list[ServiceState] = field(default_factory=list)
    silent: bool = False

    @property
    def namespace(self) -> str:
        return NS

    @property
    def deployments(self) -> "Cluster":
        return self

    async def services_of(self) -> list[ServiceState]:
        if self.silent:
            raise KubernetesUnavailable("the API server did not answer: connection refused")
        return list(self.services)


class Clusters:
    """``Connector`` over named ``Cluster``s."""

    def __init__(self, **clusters: Cluster) -> None:
        self.clusters = clusters

    async def connect(self, *, backend_name: str, target: KubernetesTarget) -> "Connected":
        cluster = self.clusters[backend_name]
        if cluster.silent:
            raise KubernetesUnavailable("the API server did not answer: connection refused")
        return Connected(cluster)


@dataclass
class Connected:
    cluster: Cluster
    namespace: str = NS

    @property
    def deployments(self) -> "Connected":
        return self

    async def services(self, *, namespace: str) -> list[ServiceState]:
        return await self.cluster.services_of()


class MemoryStore:
    def __init__(self, records: dict[tuple[str, str], ObservedRelease] | None = None) -> None:
        self.records: dict[tuple[str, str], ObservedRelease] = dict(records or {})
        self.writes = 0

    async def stored(self) -> dict[tuple[str, str], ObservedRelease | None]:
        return dict(self.records)

    async def put(self, record: ObservedRelease) -> None:
        self.writes += 1
        self.records[(record.namespace, record.release)] = record

    async def delete(self, *, namespace: str, release: str) -> None:
        self.writes += 1
        del self.records[(namespace, release)]


class RecordingProbe:
    """A probe whose runners answer as the test says, recording what it was asked."""

    def __init__(self) -> None:
        self.dead: set[str] = set()
        self.asked: list[str] = []

    async def problem(self, url: str) -> str:
        self.asked.append(url)
        return f"GET {url}/healthz failed: connection refused" if url in self.dead else ""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def service(release: str, *, ready: int = 1) -> ServiceState:
    return ServiceState(
        name=release,
        namespace=NS,
        port=80,
        run_namespace="default",
        run_name=release.removeprefix("default-").rsplit("-g", 1)[0],
        saga_id="default.shop.1.1",
        revision="1.0.0-g1",
        ready=ready,
    )


def url_of(release: str, domain: str = "svc.cluster.local") -> str:
    return f"http://{release}.{NS}.{domain}:80"


def _domain(name: str, domains: dict[str, str]) -> dict[str, str]:
    return {"serviceDomain": domains[name]} if name in domains else {}


def observer(
    clusters: Clusters,
    store: MemoryStore,
    probe: RunnerProbe,
    clock: Clock,
    *,
    domains: dict[str, str] | None = None,
) -> HelmObserver:
    """``domains``: a PlntBackend's serviceDomain, where it is not the cluster's own."""
    targets = StaticTargets(
        {name: remote_backend(**_domain(name, domains or {})) for name in clusters.clusters}
    )
    return HelmObserver(
        targets=targets,
        connector=clusters,
        store=store,
        probe=probe,
        unreachable_after_s=AFTER_S,
        clock=clock,
    )


async def test_a_silent_api_keeps_its_records_then_the_runners_that_do_not_answer_are_lost() -> (
    None
):
    east = Cluster(services=[service("default-shop-g1"), service("default-cart-g1")])
    west = Cluster(services=[service("default-shop-west-g1")])
    store, probe, clock = MemoryStore(), RecordingProbe(), Clock()
    watching = observer(Clusters(east=east, west=west), store, probe, clock)
    await watching.observe_once()
    before = dict(store.records)
    assert {r.backend_name for r in before.values()} == {"east", "west"}

    east.silent = True
    probe.dead = {url_of("default-shop-g1")}
    await watching.observe_once()
    clock.now += AFTER_S - 1
    await watching.observe_once()
    # silent, but not long enough: nothing asked, nothing changed, nothing deleted
    assert (store.records, probe.asked) == (before, [])

    clock.now += 1
    await watching.observe_once()

    assert sorted(probe.asked) == [url_of("default-cart-g1"), url_of("default-shop-g1")]
    lost = store.records[("default", "default-shop-g1")]
    assert (lost.phase, lost.reason) == (ReleasePhase.STARTING, "BackendUnreachable")
    assert lost.message == (
        "the API of PlntBackend 'east' has not answered for over 15s and "
        f"GET {url_of('default-shop-g1')}/healthz failed: connection refused"
    )
    answering = store.records[("default", "default-cart-g1")]
    assert (answering.phase, answering.reason) == (ReleasePhase.READY, "")
    assert "runner answers at its address" in answering.message
    assert (
        store.records[("default", "default-shop-west-g1")]
        == before[("default", "default-shop-west-g1")]
    )

    east.silent = False
    await watching.observe_once()
    assert store.records == before


async def test_a_lost_runner_serves_again_once_it_answers_though_the_api_is_still_silent() -> None:
    east = Cluster(services=[service("default-shop-g1")])
    clusters, store, probe, clock = Clusters(east=east), MemoryStore(), RecordingProbe(), Clock()
    watching = observer(clusters, store, probe, clock)
    await watching.observe_once()
    east.silent, probe.dead = True, {url_of("default-shop-g1")}
    await watching.observe_once()
    clock.now += AFTER_S
    await watching.observe_once()
    assert store.records[("default", "default-shop-g1")].reason == "BackendUnreachable"
    writes = store.writes

    clock.now += 4
    await watching.observe_once()  # still lost: nothing written again
    assert store.writes == writes
    probe.dead = set()
    clock.now += 5
    await watching.observe_once()

    back = store.records[("default", "default-shop-g1")]
    assert (back.phase, back.reason) == (ReleasePhase.READY, "")
    assert back.message.endswith("has not answered for over 15s")


async def test_a_release_already_without_ready_pods_is_not_probed_and_keeps_its_reason() -> None:
    east = Cluster(services=[service("default-shop-g1", ready=0)])
    clusters, store, probe, clock = Clusters(east=east), MemoryStore(), RecordingProbe(), Clock()
    watching = observer(clusters, store, probe, clock)
    await watching.observe_once()
    east.silent = True
    await watching.observe_once()
    clock.now += AFTER_S
    await watching.observe_once()

    assert probe.asked == []
    assert store.records[("default", "default-shop-g1")].reason == "NoReadyPods"


@dataclass
class Health:
    """What the runner's health route answers: a status, or nothing at all (0)."""

    status: int = 200
    hang: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
async def runner() -> AsyncIterator[tuple[str, Health]]:
    health = Health()

    async def healthz(request: web.Request) -> web.Response:
        if health.status == 0:
            await health.hang.wait()
        return web.json_response({}, status=health.status)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    served = web.AppRunner(app)
    await served.setup()
    site = web.TCPSite(served, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", health
    health.hang.set()
    await served.cleanup()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_the_probe_asks_the_runners_health_route_and_names_what_went_wrong(
    runner: tuple[str, Health],
) -> None:
    url, health = runner
    probe = HttpRunnerProbe(timeout_s=0.5)

    assert await probe.problem(url + "/") == ""
    health.status = 503
    assert await probe.problem(url) == f"GET {url}/healthz answered 503"
    health.status = 0  # accepts, never answers
    assert await probe.problem(url) == f"GET {url}/healthz did not answer within 0.5s"
    dead = f"http://127.0.0.1:{closed_port()}"
    assert (await probe.problem(dead)).startswith(f"GET {dead}/healthz failed: ")


async def test_an_observer_started_while_the_api_is_silent_probes_what_the_store_holds(
    runner: tuple[str, Health],
) -> None:
    url, _ = runner
    dead = f"http://127.0.0.1:{closed_port()}"
    stored = {
        ("default", release): ObservedRelease(
            namespace="default",
            release=release,
            run_name="shop",
            revision="1.0.0-g1",
            saga_id="default.shop.1.1",
            phase=ReleasePhase.READY,
            url=address,
            backend_name="east",
        )
        for release, address in (("default-shop-g1", url), ("default-cart-g1", dead))
    }
    clusters = Clusters(east=Cluster(silent=True))
    store, clock = MemoryStore(stored), Clock()
    watching = observer(clusters, store, HttpRunnerProbe(timeout_s=1), clock)
    await watching.observe_once()
    clock.now += AFTER_S
    await watching.observe_once()

    assert store.records[("default", "default-shop-g1")].phase is ReleasePhase.READY
    lost = store.records[("default", "default-cart-g1")]
    assert (lost.phase, lost.reason) == (ReleasePhase.STARTING, "BackendUnreachable")
    assert f"GET {dead}/healthz failed" in lost.message


async def test_a_backend_s_runners_are_called_under_its_service_domain() -> None:
    east = Cluster(services=[service("default-shop-g1")])
    west = Cluster(services=[service("default-shop-west-g1")])
    store, probe, clock = MemoryStore(), RecordingProbe(), Clock()
    clusters = Clusters(east=east, west=west)
    watching = observer(clusters, store, probe, clock, domains={"east": "svc.clusterset.local"})
    await watching.observe_once()
    assert {r.release: r.url for r in store.records.values()} == {
        "default-shop-g1": url_of("default-shop-g1", "svc.clusterset.local"),
        "default-shop-west-g1": url_of("default-shop-west-g1"),
    }

    east.silent = True
    await watching.observe_once()
    clock.now += AFTER_S
    await watching.observe_once()
    assert probe.asked == [url_of("default-shop-g1", "svc.clusterset.local")]
