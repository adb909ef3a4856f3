"""Shadow traffic: live calls mirrored to a canary after their answer, pairs on the bus.

While a route carries ``shadow`` (a run is ``Shadowing``), ``ShadowMirror.order`` picks the
live calls to mirror (exactly ``percent`` percent to the canary, ``noise_percent`` percent
to the stable again) before they go to the stable, which is then asked for its side-effect
calls. Once the caller's answer is decided, ``submit`` queues the mirrored calls without
waiting; a fixed number of workers send them (``x-plnt-shadow: 1``, JSON, on a pool apart
from the live calls'), build the ``ShadowPair`` and publish it. A full queue drops the
mirror and counts it; a pair the bus does not take is dropped and counted, never retried.
So the caller's answer never waits for a mirror and never changes with its failure.

Budget: what mirrored calls cost is summed per saga (``logic.ShadowBudget``, this
process's share only); once it reaches ``budget_usd`` nothing more is mirrored for it.
This module decides nothing about routing and does not read the route table.
"""

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Protocol

from plnt_common.logs import get_logger
from plnt_common.routes import RouteTarget
from plnt_common.shadow_pairs import (
    EFFECTS_REQUEST_HEADER,
    EFFECTS_RESPONSE_HEADER,
    SHADOW_HEADER,
    PairKind,
    ShadowAnswer,
    ShadowPair,
    ShadowRoute,
)
from plnt_router.adapters.upstream import RunnerClient
from plnt_router.errors import UpstreamTimeout, UpstreamUnavailable
from plnt_router.logic import ShadowBudget, choose_mirrors
from plnt_router.metrics import SHADOW_BUDGET_SPENT, SHADOW_CALLS, SHADOW_DROPPED
from plnt_router.shadow_answer import (
    COST_HEADER,
    json_body,
    streamed_answer,
    unreached,
    whole_answer,
)
from plnt_router.table import Route

log = get_logger(__name__)

MIRROR_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json",  # a streamed live call is mirrored as a whole call
    SHADOW_HEADER: "1",
    EFFECTS_REQUEST_HEADER: "1",
}
MAX_KEPT_ANSWER_BYTES = 1024 * 1024
"""An answer longer than this is not kept for its pair (its body is then null)."""


class PairPublisher(Protocol):
    """Where finished pairs go (the ``PLNT_SHADOW`` stream)."""

    async def publish(self, pair: ShadowPair) -> None:
        """Publish ``pair``; raises ``BusUnavailable`` when the bus did not take it."""
        ...


@dataclass(slots=True)
class MirrorOrder:
    """A live call chosen for mirroring, decided before it is sent to the stable."""

    namespace: str
    name: str
    shadow: ShadowRoute
    stable: RouteTarget
    canary: RouteTarget | None
    """Mirrored to the canary (None: this call is only sent to the stable again)."""
    noise: bool
    body: bytes
    started: float = 0.0
    """``perf_counter`` when the live call left for the stable."""
    pair_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Shared by the call's canary and noise pairs."""

    @property
    def workflow(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class LiveAnswer:
    """The stable's answer to a mirrored live call, as the caller got it."""

    revision: str
    status: int
    raw: bytes | None
    streamed: bool
    cost: str | None
    effects: str | None
    latency_ms: float

    def answer(self) -> ShadowAnswer:
        build = streamed_answer if self.streamed else whole_answer
        return build(
            revision=self.revision,
            status=self.status,
            raw=self.raw,
            latency_ms=self.latency_ms,
            cost=self.cost,
            effects=self.effects,
        )


class AnswerBuffer:
    """The pieces of a streamed answer kept for its pair, up to ``MAX_KEPT_ANSWER_BYTES``."""

    __slots__ = ("_pieces", "_size")

    def __init__(self) -> None:
        self._pieces: list[bytes] | None = []
        self._size = 0

    def add(self, piece: bytes) -> None:
        if self._pieces is None:
            return
        self._size += len(piece)
        if self._size > MAX_KEPT_ANSWER_BYTES:
            self._pieces = None  # too long to keep: the pair says null rather than half
        else:
            self._pieces.append(piece)

    def whole(self) -> bytes | None:
        return None if self._pieces is None else b"".join(self._pieces)


@dataclass(frozen=True, slots=True)
class _Job:
    order: MirrorOrder
    kind: PairKind
    target: RouteTarget
    live: LiveAnswer


class ShadowMirror:
    """The bounded queue of mirrored calls, its workers, and the per-saga budget."""

    def __init__(
        self,
        *,
        workers: int,
        queue: int,
        timeout_s: float,
        publish_timeout_s: float,
        invoke_path: str,
    ) -> None:
        self._workers = workers
        self._queue: asyncio.Queue[_Job] = asyncio.Queue(maxsize=queue)
        self._runners = RunnerClient(max_connections=workers, timeout_s=timeout_s)
        self._publish_timeout_s = publish_timeout_s
        self._invoke_path = invoke_path
        self._budget = ShadowBudget()
        self._publisher: PairPublisher | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def publish_with(self, publisher: PairPublisher | None) -> None:
        """Publish pairs through ``publisher`` from now on (None: pairs are dropped)."""
        self._publisher = publisher

    async def start(self) -> None:
        await self._runners.start()
        self._tasks = [
            asyncio.create_task(self._work(), name=f"plnt-router-shadow-{n}")
            for n in range(self._workers)
        ]

    async def stop(self) -> None:
        """Stop the workers; mirrors still queued or in flight are abandoned (logged)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if not self._queue.empty():
            log.info("router.shadow_abandoned", queued=self._queue.qsize())
        await self._runners.close()

    def order(
        self, route: Route, target: RouteTarget, *, namespace: str, name: str, body: bytes
    ) -> MirrorOrder | None:
        """Whether the live call about to go to ``target`` is mirrored, and where; None
        when not (no shadow, the call goes elsewhere than the stable, the budget is spent,
        or the split says no)."""
        entry = route.entry
        shadow = entry.shadow
        if shadow is None or entry.stable is None or target.url != entry.stable.url:
            return None
        if not self._budget.allows(shadow.saga_id, shadow.budget_usd):
            return None
        to_canary, noise = choose_mirrors(
            shadow=shadow, canary_split=route.shadow_split, noise_split=route.noise_split
        )
        canary = entry.canary if to_canary else None
        if canary is None and not noise:
            return None
        return MirrorOrder(
            namespace=namespace,
            name=name,
            shadow=shadow,
            stable=target,
            canary=canary,
            noise=noise,
            body=body,
        )

    def submit(self, order: MirrorOrder, live: LiveAnswer) -> None:
        """Queue the order's mirrored calls; never waits. A full queue drops them (counted)."""
        kinds = [(PairKind.CANARY, order.canary)] if order.canary is not None else []
        if order.noise:
            kinds.append((PairKind.NOISE, order.stable))
        for kind, target in kinds:
            try:
                self._queue.put_nowait(_Job(order=order, kind=kind, target=target, live=live))
            except asyncio.QueueFull:
                SHADOW_CALLS.labels(order.workflow, kind.value, "queue_full").inc()
                SHADOW_DROPPED.labels("queue_full").inc()

    async def _work(self) -> None:
        while True:
            job = await self._queue.get()
            try:
                await self._mirror(job)
            except Exception:  # a bug: this worker must keep serving the queue
                log.exception("router.shadow_failed", workflow=job.order.workflow)

    async def _mirror(self, job: _Job) -> None:
        order, kind = job.order, job.kind.value
        shadow = order.shadow
        # Checked again here: mirrors queued before the budget ran out are not sent.
        if not self._budget.allows(shadow.saga_id, shadow.budget_usd):
            SHADOW_CALLS.labels(order.workflow, kind, "over_budget").inc()
            return
        candidate = await self._call(job.target, order.body)
        if self._budget.spend(shadow.saga_id, candidate.cost_usd, shadow.budget_usd):
            SHADOW_BUDGET_SPENT.labels(order.workflow).inc()
            log.info(
                "router.shadow_budget_spent",
                workflow=order.workflow,
                sagaid=shadow.saga_id,
                budget_usd=shadow.budget_usd,
                spent_usd=round(self._budget.spent(shadow.saga_id), 6),
            )
        pair = ShadowPair(
            pair_id=order.pair_id,
            namespace=order.namespace,
            name=order.name,
            saga_id=shadow.saga_id,
            kind=job.kind,
            input=json_body(order.body),
            stable=job.live.answer(),
            candidate=candidate,
            at=time.time(),
        )
        if await self._publish(pair):
            SHADOW_CALLS.labels(order.workflow, kind, "published").inc()
        else:
            SHADOW_CALLS.labels(order.workflow, kind, "publish_failed").inc()
            SHADOW_DROPPED.labels("publish_failed").inc()

    async def _call(self, target: RouteTarget, body: bytes) -> ShadowAnswer:
        """The mirrored call's whole answer; status 0 when the runner failed to give one."""
        started = time.perf_counter()
        try:
            reply = await self._runners.post(
                url=target.url.rstrip("/") + self._invoke_path,
                body=body,
                headers=MIRROR_HEADERS,
                stream=False,
            )
            try:
                raw = await reply.read()
            finally:
                reply.close()
        except (UpstreamTimeout, UpstreamUnavailable) as exc:
            log.debug("router.shadow_unanswered", revision=target.revision, error=str(exc))
            return unreached(
                revision=target.revision, latency_ms=(time.perf_counter() - started) * 1000
            )
        return whole_answer(
            revision=target.revision,
            status=reply.status,
            raw=raw,
            latency_ms=(time.perf_counter() - started) * 1000,
            cost=reply.header(COST_HEADER),
            effects=reply.header(EFFECTS_RESPONSE_HEADER),
        )

    async def _publish(self, pair: ShadowPair) -> bool:
        publisher = self._publisher
        if publisher is None:
            return False
        try:
            async with asyncio.timeout(self._publish_timeout_s):
                await publisher.publish(pair)
        except Exception as exc:  # the bus is away or refused: drop, never retry for ever
            log.debug("router.shadow_pair_dropped", pair_id=pair.pair_id, error=str(exc))
            return False
        return True
