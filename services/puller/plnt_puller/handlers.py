"""One ``run.requested`` through the pull step: decode -> observe -> decide -> act -> publish.

``PullHandler.handle`` is the consumer's handler and ``on_exhausted`` its last word once
deliveries ran out. Decisions come from ``logic``; I/O goes through the ports. Delivery
rules: return normally only after the outcome event was published (the consumer then
acks); raise to be redelivered with back-off. Publishing twice is safe: the bus sets
``Nats-Msg-Id`` per saga step, and ``run.failed`` goes through the saga's terminal claim.
"""

import asyncio
from dataclasses import dataclass

from plnt_common import faults
from plnt_common.backend_catalog import BackendCatalog
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.saga import observe_saga
from plnt_common.code_archive import MAX_ARCHIVE_BYTES
from plnt_common.errors import (
    BackendNotAllowed,
    BackendUnavailable,
    PlntError,
    SpecInvalid,
    SpecNotFound,
)
from plnt_common.events import (
    BackendChoice,
    Envelope,
    EventType,
    RunFailed,
    RunRequested,
    RunSnapshot,
    SpecPulled,
    follow_up,
)
from plnt_common.label_selector import describe, selects
from plnt_common.logs import get_logger
from plnt_common.metrics import SIDE_EFFECTS
from plnt_common.oci import Logins
from plnt_common.resources import PlacementEntry, PlntBackendSpec
from plnt_common.saga import SagaState
from plnt_common.tasks import discard, discarded_on_error
from plnt_common.workflow import CodeArchive, spec_digest
from plnt_puller import logic
from plnt_puller.ports import NamespaceLabels, PullSecrets, Registry, SpecStore

SOURCE = "puller"

log = get_logger(__name__)


@dataclass(frozen=True)
class PullHandler:
    """The puller's saga step, bound to its bus and ports."""

    bus: Bus
    registry: Registry
    backends: BackendCatalog
    specs: SpecStore
    max_attempts: int
    pull_secrets: PullSecrets | None = None
    """Where runs' ``spec.workflow.pullSecret`` is read; None without Kubernetes access,
    where a run naming one fails ``PullSecretInvalid``."""
    namespaces: NamespaceLabels | None = None
    """Where the labels of runs' namespaces are read for ``allowedNamespaces``; None
    without Kubernetes access (the embedded mode), where namespaces have no labels."""

    async def handle(self, event: Envelope, delivery: Delivery) -> None:
        """Publish ``spec.pulled`` or ``run.failed`` for ``event``, or nothing if it ended.

        Raises (so the consumer NAKs) on retryable errors: registry or bus unavailable,
        and anything unexpected.
        """
        requested = _requested(event)
        run = requested.run
        # Reading the spec and the backend changes nothing: start them with the saga check.
        reads = asyncio.gather(self._fetch(run), self._first_candidate(run))
        async with discarded_on_error(reads):
            state = await observe_saga(self.bus, event)
        gate = logic.saga_gate(
            ended=state is SagaState.ENDED, superseded=state is SagaState.SUPERSEDED
        )
        if gate is not None:
            await discard(reads)
            if isinstance(gate, logic.Ignore):
                log.info("pull.ignored", why=gate.why)
            else:
                await self._fail(event, gate)
            return
        try:
            (raw, signature, stored, logins), backend = await reads
            pulled = await self._pull(
                run,
                raw,
                signature,
                backend,
                stored=stored,
                logins=logins,
                standing=(*requested.lost, *requested.kept),
            )
        except Exception as exc:
            failure = logic.failure_for(exc, ref=run.spec.workflow.ref)
            if failure is None:
                raise
            await self._fail(event, failure)
            return
        await faults.pause_point(SOURCE, event.event_type.value, "after_effect")
        await self.bus.publish(follow_up(event, EventType.SPEC_PULLED, pulled, source=SOURCE))
        log.info("pull.succeeded", digest=pulled.spec_digest, revision=pulled.revision)

    async def on_exhausted(self, event: Envelope, error: BaseException) -> None:
        """Publish ``run.failed`` naming the last error once deliveries ran out."""
        failure = logic.failure_after_exhaustion(
            error, ref=_requested(event).run.spec.workflow.ref, attempts=self.max_attempts
        )
        await self._fail(event, failure)

    async def _fetch(self, run: RunSnapshot) -> tuple[bytes, bytes | None, bool, Logins | None]:
        """The spec's bytes, its signature when the run verifies one (None: not there or
        not asked for), whether the spec store holds the spec already, and the logins of
        the run's pull secret (None when it names none)."""
        ref = run.spec.workflow
        logins = await self._logins(run)
        raw = await self.registry.fetch(
            registry=ref.registry, name=ref.name, version=ref.version, logins=logins
        )
        signature = None
        if ref.verify is not None:
            signature = await self.registry.fetch_signature(
                registry=ref.registry, name=ref.name, version=ref.version, logins=logins
            )
        return raw, signature, await self.specs.contains(digest=spec_digest(raw)), logins

    async def _logins(self, run: RunSnapshot) -> Logins | None:
        """The run's pull secret's logins; raises ``PullSecretInvalid`` (also when the
        puller cannot read Secrets) or ``KubernetesUnavailable`` (retryable)."""
        secret = run.spec.workflow.pull_secret
        if secret is None:
            return None
        if self.pull_secrets is None:
            raise logic.pull_secret_unreadable(name=secret.name, namespace=run.namespace)
        return await self.pull_secrets.logins(namespace=run.namespace, name=secret.name)

    async def _pull(
        self,
        run: RunSnapshot,
        raw: bytes,
        signature: bytes | None,
        backend: PlntBackendSpec | None,
        *,
        stored: bool,
        logins: Logins | None = None,
        standing: tuple[PlacementEntry, ...] = (),
    ) -> SpecPulled:
        """Check the signature (first: nothing of an untrusted spec is read), verify,
        validate, check the backend, then store unless ``stored``; raises ``PlntError``."""
        ref = run.spec.workflow
        logic.verify_signature(raw=raw, signature=signature, verify=ref.verify)
        digest = logic.verify_integrity(raw=raw, pinned=ref.integrity_hash)
        workflow = logic.validate_spec(raw=raw, name=ref.name, version=ref.version)
        chosen, skipped = await self._choose_backend(
            run, backend, workflow.spec.runtime.image, standing=standing
        )
        if workflow.spec.runtime.code is not None:
            await self._pull_code(run, workflow.spec.runtime.code, logins)
        # Stored last, once nothing can refuse the run, so failed pulls leave no objects.
        if not stored:
            await self.specs.put(digest=digest, data=raw)
            SIDE_EFFECTS.labels(SOURCE, "spec_store").inc()
        log.info("pull.spec_stored", digest=digest, written=not stored)
        return logic.spec_pulled(
            run=run, digest=digest, workflow=workflow, chosen=chosen, skipped=skipped
        )

    async def _first_candidate(self, run: RunSnapshot) -> PlntBackendSpec | None:
        candidates = run.spec.candidates
        return await self.backends.get(candidates[0]) if candidates else None

    async def _choose_backend(
        self,
        run: RunSnapshot,
        first: PlntBackendSpec | None,
        image: str,
        *,
        standing: tuple[PlacementEntry, ...] = (),
    ) -> tuple[list[BackendChoice], list[PlacementEntry]]:
        """Every candidate (spec.backend.cluster, or spec.placement.backends in order) that
        exists, offers the GPU class and allows the run, and each one passed over with its
        one-line reason. A replacement passes over each backend of ``standing`` as it stands:
        Lost, or Serving (a spread run's copy that keeps serving). None fits: the last
        refusal's error, naming every reason."""
        named = run.spec.candidates
        candidates = named or await self._selected(run)
        gpu_class = run.spec.backend.gpu_class
        refusals: list[PlntError] = []
        skipped: list[PlacementEntry] = []
        chosen: list[BackendChoice] = []
        standing_by_name = {entry.backend: entry for entry in standing}
        for index, name in enumerate(candidates):
            if name in standing_by_name:
                skipped.append(standing_by_name[name])
                refusals.append(BackendUnavailable(_held_by_replaced(standing_by_name[name])))
                continue
            # the first named one was read beside the spec; selected ones are read now
            backend = first if named and index == 0 else await self.backends.get(name)
            try:
                checked = logic.check_backend(name=name, backend=backend, gpu_class=gpu_class)
                await self._check_allowed(run, name, checked, image)
            except (BackendUnavailable, BackendNotAllowed) as exc:
                refusals.append(exc)
                skipped.append(
                    PlacementEntry(backend=name, state="Skipped", reason=f"{exc.reason}: {exc}")
                )
                continue
            chosen.append(BackendChoice(backend_name=name, backend=checked))
        if chosen:
            return chosen, skipped
        if len(refusals) == 1:
            raise refusals[0]
        reasons = "; ".join(f"{exc.reason}: {exc}" for exc in refusals)
        raise type(refusals[-1])(f"no backend of spec.placement fits: {reasons}")

    async def _selected(self, run: RunSnapshot) -> tuple[str, ...]:
        """The PlntBackends ``spec.placement.selector`` matches, in name order; raises
        ``BackendUnavailable`` when none does."""
        placement = run.spec.placement
        selector = placement.selector if placement is not None else None
        if selector is None:  # a run always names backends or gives a selector
            raise BackendUnavailable("spec.placement names no backend and no selector")
        matched = sorted(
            name
            for name, labels in (await self.backends.labels()).items()
            if selects(selector, labels)
        )
        if not matched:
            raise BackendUnavailable(
                f"no PlntBackend matches spec.placement.selector '{describe(selector)}'"
            )
        return tuple(matched)

    async def _check_allowed(
        self, run: RunSnapshot, name: str, backend: PlntBackendSpec, image: str
    ) -> None:
        """Raise ``BackendNotAllowed`` when ``backend`` refuses the run's image or namespace;
        the namespace's labels are read only when the backend selects namespaces."""
        logic.check_image_allowed(name=name, backend=backend, image=image)
        if backend.allowed_namespaces is None:
            return
        labels = (
            await self.namespaces.labels(namespace=run.namespace)
            if self.namespaces is not None
            else {}
        )
        logic.check_namespace_allowed(
            name=name, backend=backend, namespace=run.namespace, labels=labels
        )

    async def _pull_code(
        self, run: RunSnapshot, code: CodeArchive, logins: Logins | None = None
    ) -> None:
        """Fetch the code archive beside the spec, verify it and store it by its digest;
        raises ``CodeInvalid``, or a retryable error of the registry or the store.

        An archive already stored under its digest was verified when it was stored: it is
        neither fetched nor checked again.
        """
        ref = run.spec.workflow
        if await self.specs.contains(digest=code.digest):
            log.info("pull.code_stored", digest=code.digest, written=False)
            return
        try:
            data = await self.registry.fetch(
                registry=ref.registry,
                name=ref.name,
                version=ref.version,
                file=code.archive,
                max_bytes=MAX_ARCHIVE_BYTES,
                logins=logins,
            )
        except (SpecNotFound, SpecInvalid) as exc:
            raise logic.code_missing(exc, code=code, ref=ref.ref) from None
        # Unpacking to check every member takes CPU time on a large archive: not on the loop.
        await asyncio.to_thread(logic.verify_code, data=data, code=code, ref=ref.ref)
        await self.specs.put(digest=code.digest, data=data)
        SIDE_EFFECTS.labels(SOURCE, "code_store").inc()
        log.info("pull.code_stored", digest=code.digest, written=True, bytes=len(data))

    async def _fail(self, event: Envelope, failure: RunFailed) -> None:
        claimed = await self.bus.publish_terminal(
            follow_up(event, EventType.RUN_FAILED, failure, source=SOURCE)
        )
        log.warning(
            "pull.failed", reason=failure.reason.value, message=failure.message, published=claimed
        )


def _requested(event: Envelope) -> RunRequested:
    payload = event.payload()
    if not isinstance(payload, RunRequested):  # the consumer's filter makes this a bug
        raise TypeError(f"the puller handles run.requested, not {event.event_type.value}")
    return payload


def _held_by_replaced(entry: PlacementEntry) -> str:
    if entry.state == "Serving":
        return f"{entry.backend!r} serves a copy already"
    return f"{entry.backend!r} is lost ({entry.reason})"
