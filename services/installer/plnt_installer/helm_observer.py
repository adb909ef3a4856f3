"""Observes the Helm releases' Services, so routes on Kubernetes follow what serves too.

A Helm release serves at its Service's address, which outlives its pods; whether it
serves is whether the Service has a ready endpoint (a pod passing its readiness probe).
Every ``interval_s`` the observer lists, on each kubernetes PlntBackend, the plnt runner
Services with their endpoints, and publishes one ``ObservedRelease`` per release under
``observed-kube.<ns>.<release>`` in ``plnt-releases``, the shape the local-backend
reports its runners in; the promoter follows both. A record whose Service is gone is
deleted, unless some PlntBackend could not be read this round (gone is then unknown).

A PlntBackend whose API stays silent for ``unreachable_after_s`` has its releases asked
directly: each serving record is probed at its address (``GET /healthz``), and one that
does not answer is reported down with reason ``BackendUnreachable``, which the watcher
treats as lost (``spec.placement.failover`` replaces it elsewhere). One that answers is
left serving: a silent API alone is not a loss.

``observation`` is the pure part; the Kubernetes reads and the KV writes are adapters
(``adapters/kube_readiness.py``, ``adapters/kube_observations.py``).
"""

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from plnt_common.errors import PlntError
from plnt_common.logs import get_logger
from plnt_common.releases import ObservedRelease, ReleasePhase
from plnt_common.resources import CLUSTER_DOMAIN, KubernetesTarget, service_url
from plnt_common.status import ServingReason
from plnt_installer.kube_ports import KubernetesTargets

log = get_logger(__name__)

INTERVAL_S = 2.0
"""Between two rounds: how late a lost (or regained) readiness reaches the route."""
UNREACHABLE_AFTER_S = 15.0
"""How long a PlntBackend's API may be silent before its releases are probed directly."""


@dataclass(frozen=True, kw_only=True)
class ServiceState:
    """A plnt runner Service and its endpoints, as the API shows them."""

    name: str
    """The Service's (and the Helm release's) name."""
    namespace: str
    """Where it lives in the cluster (the PlntBackend's namespace)."""
    port: int
    run_namespace: str = ""
    """The namespace of the WorkflowRun it serves (empty: not a plnt release)."""
    run_name: str = ""
    """The WorkflowRun it serves (the runner chart's ``plnt.work/workflowrun`` label)."""
    saga_id: str = ""
    revision: str = ""
    ready: int = 0
    """Ready endpoint addresses."""
    not_ready: int = 0


def observation(
    service: ServiceState, *, backend: str, domain: str = CLUSTER_DOMAIN
) -> ObservedRelease | None:
    """What the promoter should know of ``service`` (on PlntBackend ``backend``, whose
    Services plnt calls under ``domain``); None when it is not a plnt release."""
    if not service.run_namespace or not service.revision:
        return None
    url = service_url(
        name=service.name, namespace=service.namespace, port=service.port, domain=domain
    )
    if service.ready > 0:
        phase, reason, message = ReleasePhase.READY, "", f"{service.ready} ready endpoints"
    else:
        phase, reason = ReleasePhase.STARTING, ServingReason.NO_READY_PODS.value
        message = f"Service {service.namespace}/{service.name} has no ready endpoint"
        if service.not_ready:
            message += f" ({service.not_ready} not ready)"
    return ObservedRelease(
        namespace=service.run_namespace,
        release=service.name,
        run_name=service.run_name,
        revision=service.revision,
        saga_id=service.saga_id,
        phase=phase,
        url=url,
        reason=reason,
        message=message,
        backend_name=backend,
    )


def unreachable(record: ObservedRelease, *, after_s: float, problem: str) -> ObservedRelease:
    """``record`` once its PlntBackend's API has been silent over ``after_s`` seconds and
    its runner answered the probe with ``problem`` ("" when it still serves). The message
    stays the same while nothing changes, so a long silence writes nothing new."""
    api = f"the API of PlntBackend {record.backend_name!r} has not answered for over {after_s:g}s"
    if not problem:
        return record.model_copy(
            update={
                "phase": ReleasePhase.READY,
                "reason": "",
                "message": f"the runner answers at its address; {api}",
            }
        )
    return record.model_copy(
        update={
            "phase": ReleasePhase.STARTING,
            "reason": ServingReason.BACKEND_UNREACHABLE.value,
            "message": f"{api} and {problem}",
        }
    )


def probed(record: ObservedRelease) -> bool:
    """A record the probe may confirm or refute: serving, or refuted by an earlier probe."""
    return record.phase is ReleasePhase.READY or (
        record.reason == ServingReason.BACKEND_UNREACHABLE.value
    )


class ReleaseServices(Protocol):
    """The runner Services of one cluster namespace (``KubeDeployments.services``)."""

    async def services(self, *, namespace: str) -> list[ServiceState]: ...


class Connected(Protocol):
    @property
    def namespace(self) -> str: ...

    @property
    def deployments(self) -> ReleaseServices: ...


class Connector(Protocol):
    async def connect(self, *, backend_name: str, target: KubernetesTarget) -> Connected: ...


class ObservationStore(Protocol):
    """Where observations go (``observed-kube.*`` keys of ``plnt-releases``)."""

    async def stored(self) -> dict[tuple[str, str], ObservedRelease | None]:
        """Every record there now, by (namespace, release)."""
        ...

    async def put(self, record: ObservedRelease) -> None: ...

    async def delete(self, *, namespace: str, release: str) -> None: ...


class RunnerProbe(Protocol):
    """Asks a runner itself (``adapters/runner_probe.py``)."""

    async def problem(self, url: str) -> str:
        """Why the runner at ``url`` does not serve; "" when it does."""
        ...


class HelmObserver:
    """Publishes what each Helm release's Service shows, every ``interval_s``."""

    def __init__(
        self,
        *,
        targets: KubernetesTargets,
        connector: Connector,
        store: ObservationStore,
        probe: RunnerProbe,
        interval_s: float = INTERVAL_S,
        unreachable_after_s: float = UNREACHABLE_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._targets = targets
        self._connector = connector
        self._store = store
        self._probe = probe
        self._interval_s = interval_s
        self._unreachable_after_s = unreachable_after_s
        self._clock = clock
        self._published: dict[tuple[str, str], ObservedRelease | None] | None = None
        """What the store holds, as far as this observer knows (None: not read yet)."""
        self._silent_since: dict[str, float] = {}
        """PlntBackend -> when its API first failed to answer, in the current silence."""

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.observe_once()
            except Exception as exc:  # the next round observes again from scratch
                log.warning("helm_observer.round_failed", error=repr(exc))
                self._published = None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._interval_s)

    async def observe_once(self) -> None:
        """One round: read every kubernetes PlntBackend, write what changed."""
        if self._published is None:
            self._published = await self._store.stored()
        seen, silent = await self._observe()
        published = self._published
        seen.update(await self._probed(silent, published))
        complete = not silent
        for key, record in seen.items():
            if published.get(key) != record:
                await self._store.put(record)
                published[key] = record
                log.info(
                    "helm_observer.observed",
                    namespace=key[0],
                    release=key[1],
                    phase=record.phase.value,
                    url=record.url,
                )
        if complete:
            for key in set(published) - set(seen):
                await self._store.delete(namespace=key[0], release=key[1])
                del published[key]

    async def _observe(self) -> tuple[dict[tuple[str, str], ObservedRelease], dict[str, float]]:
        """What the APIs show, and each PlntBackend whose API did not answer with how long
        it has been silent."""
        seen: dict[tuple[str, str], ObservedRelease] = {}
        silent: dict[str, float] = {}
        now = self._clock()
        kube = {n: s.kubernetes for n, s in (await self._targets.all()).items() if s.kubernetes}
        for name in set(self._silent_since) - set(kube):
            del self._silent_since[name]  # deleted PlntBackends are not silent
        for name, target in sorted(kube.items()):
            try:
                conn = await self._connector.connect(backend_name=name, target=target)
                services = await conn.deployments.services(namespace=conn.namespace)
            except PlntError as exc:
                log.warning("helm_observer.backend_unreadable", backend=name, error=str(exc))
                silent[name] = now - self._silent_since.setdefault(name, now)
                continue
            self._silent_since.pop(name, None)
            for service in services:
                record = observation(service, backend=name, domain=target.service_domain)
                if record is not None:
                    seen[(record.namespace, record.release)] = record
        return seen, silent

    async def _probed(
        self,
        silent: dict[str, float],
        published: dict[tuple[str, str], ObservedRelease | None],
    ) -> dict[tuple[str, str], ObservedRelease]:
        """The published records of PlntBackends silent for ``unreachable_after_s``, each
        as its runner's own answer says."""
        asked = [
            (key, record)
            for key, record in published.items()
            if record is not None
            and silent.get(record.backend_name, 0.0) >= self._unreachable_after_s
            and probed(record)
        ]
        problems = await asyncio.gather(*(self._probe.problem(r.url) for _, r in asked))
        return {
            key: unreachable(record, after_s=self._unreachable_after_s, problem=problem)
            for (key, record), problem in zip(asked, problems, strict=True)
        }
