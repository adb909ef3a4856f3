"""A shadow check's clock is the phase's start (the time of ``shadow.started``), not the
check's own delivery: a promoter restarted mid-phase resumes the same window, and a check
defers to the next one without holding the delivery. Real nats-server, the promoter's
handlers called as its consumer would."""

import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta

import pytest
from nats.js.errors import BadRequestError

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.history import read_events
from plnt_common.bus.saga import advance_latest_saga
from plnt_common.embeddings import MISSING_EXTRA, SimilarityUnavailable
from plnt_common.events import CanaryRef, Envelope, EventType, ShadowStarted, new_event
from plnt_common.figures import RevisionTotals
from plnt_common.resources import Shadow, ShadowStatus
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_common.shadow_pairs import PairKind, ShadowAnswer, ShadowPair, ShadowRoute
from plnt_promoter.adapters.route_table import RouteTable
from plnt_promoter.handlers import PromoterHandlers

NS, NAME = "default", "clocked"
SAGA = f"{NS}.{NAME}.2.1"
CANARY = CanaryRef(revision="2.0.0-g2", release="default-clocked-g2", url="http://127.0.0.1:2")
PLAN = Shadow(percent=20, calls=5, maxDuration="3s")


class NoFigures:
    async def totals(self, *, namespace: str, name: str) -> dict[str, RevisionTotals]:
        return {}


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    opened = await Bus.open(nats_url, service="promoter")
    with contextlib.suppress(BadRequestError):  # provisioned already (Bus.open)
        await opened.js.add_stream(
            name=subjects.SHADOW_STREAM, subjects=list(subjects.SHADOW_SUBJECTS)
        )
    routes = RouteTable(opened.routes)
    stable = RouteTarget(revision="1.0.0-g1", url="http://127.0.0.1:1", saga_id="x.1.1")
    canary = RouteTarget(revision=CANARY.revision, url=CANARY.url, saga_id=SAGA)
    shadow = ShadowRoute(saga_id=SAGA, percent=20, noise_percent=5)
    entry = RouteEntry(namespace=NS, name=NAME, stable=stable, canary=canary, shadow=shadow)
    await routes.update(namespace=NS, name=NAME, change=lambda _: entry)
    await advance_latest_saga(opened, NS, NAME, SAGA)
    yield opened
    await opened.close()


def started(age_s: float) -> Envelope:
    data = ShadowStarted(
        canary=CANARY, plan=PLAN, noise_percent=5, figures=ShadowStatus(calls=PLAN.calls)
    )
    event = new_event(
        EventType.SHADOW_STARTED,
        data,
        namespace=NS,
        name=NAME,
        sagaid=SAGA,
        generation=2,
        source="promoter",
    )
    return event.model_copy(update={"time": event.time - timedelta(seconds=age_s)})


async def published(bus: Bus, kind: EventType) -> list[Envelope]:
    return [
        stored.event
        async for stored in read_events(bus.nc, filter_subject=subjects.run_filter(NS, NAME))
        if stored.event is not None and stored.event.event_type is kind
    ]


def handlers(bus: Bus) -> PromoterHandlers:
    return PromoterHandlers(
        bus=bus,
        routes=RouteTable(bus.routes),
        public_url="http://router",
        figures=NoFigures(),
        shadow_check_s=2.0,
    )


async def test_a_check_early_in_the_phase_defers_to_the_next_check_and_publishes_nothing(
    bus: Bus,
) -> None:
    delivery = Delivery(msg=None, attempt=1)  # type: ignore[arg-type]
    await handlers(bus).handle(started(age_s=0.0), delivery)
    assert delivery.deferred_s == pytest.approx(2.0)
    assert await published(bus, EventType.SHADOW_FAILED) == []


async def test_a_check_near_the_end_defers_only_to_the_end(bus: Bus) -> None:
    delivery = Delivery(msg=None, attempt=1)  # type: ignore[arg-type]
    await handlers(bus).handle(started(age_s=2.5), delivery)
    assert delivery.deferred_s is not None and 0.0 < delivery.deferred_s <= 0.5


async def test_a_check_after_a_restart_judges_the_phase_from_shadow_started(bus: Bus) -> None:
    # a promoter restarted 4 s into a 3 s phase: its first check is already past the end
    delivery = Delivery(msg=None, attempt=1)  # type: ignore[arg-type]
    await handlers(bus).handle(started(age_s=4.0), delivery)
    assert delivery.deferred_s is None
    (failed,) = await published(bus, EventType.SHADOW_FAILED)
    assert failed.payload().figures.reason == "only 0 of 5 pairs within maxDuration 3s"


class NoModel:
    """The scorer where the golden extra is not installed."""

    async def similarities(self, *, texts: Sequence[str], references: Sequence[str]) -> list[float]:
        raise SimilarityUnavailable(MISSING_EXTRA)


async def test_text_answers_without_the_embedding_model_fail_the_phase_saying_what_to_install(
    bus: Bus,
) -> None:
    for index, text in enumerate(["Thanks!", "Thank you!"]):
        answer = {"output": None, "reply": text, "usage": {}}
        pair = ShadowPair(
            pair_id=f"p{index}",
            namespace=NS,
            name=NAME,
            saga_id=SAGA,
            kind=PairKind.CANARY,
            input={},
            stable=ShadowAnswer(revision="1.0.0-g1", status=200, body=answer, latency_ms=1),
            candidate=ShadowAnswer(
                revision=CANARY.revision,
                status=200,
                body={**answer, "reply": "Cheers."},
                latency_ms=1,
            ),
            at=time.time(),
        )
        await bus.js.publish(subjects.shadow_subject(NS, NAME), pair.model_dump_json().encode())
    promoter = PromoterHandlers(
        bus=bus,
        routes=RouteTable(bus.routes),
        public_url="http://router",
        figures=NoFigures(),
        scorer=NoModel(),
    )
    await promoter.handle(started(age_s=0.0), Delivery(msg=None, attempt=1))  # type: ignore[arg-type]
    (failed,) = await published(bus, EventType.SHADOW_FAILED)
    assert failed.payload().figures.reason == f"answers could not be scored: {MISSING_EXTRA}"
