"""Which saga service's handler each event reaches, on FastStream's in-memory broker.

The subscribers are declared by ``declare_service`` from each service's ``CONSUMES``, as
the running services declare them; delivery itself is tested against a real server
(tests/common/test_bus_consumer*.py).
"""

from collections import defaultdict
from collections.abc import AsyncIterator

import pytest
from faststream.nats import NatsBroker, TestNatsBroker

from plnt_common import subjects
from plnt_common.bus.asyncapi import SAGA_SERVICES, consumer_filters, service_module
from plnt_common.bus.consumer import ConsumerSpec, Delivery, Handler
from plnt_common.bus.service_app import declare_service
from plnt_common.events import Envelope, EventType

SAGA_HOPS = {
    EventType.RUN_REQUESTED: {"puller"},
    EventType.SPEC_PULLED: {"installer"},
    EventType.CANARY_INSTALLED: {"smoke", "promoter"},
    EventType.INSTALL_FAILED: {"installer"},
    EventType.SMOKE_PASSED: {"promoter"},
    EventType.SMOKE_FAILED: {"promoter"},
    EventType.RUN_READY: {"installer"},
    EventType.ROUTE_RESTORED: {"installer"},
    EventType.RUN_DELETED: {"promoter", "installer"},
}
"""Who consumes what beside the watcher (which folds every event), as the saga's table
says; a service may take more (the operator requests, the revert)."""

Received = dict[str, list[tuple[str, int]]]


def recorder(service: str, received: Received) -> Handler:
    async def handle(envelope: Envelope, delivery: Delivery) -> None:
        received[service].append((envelope.type, delivery.attempt))

    return handle


def saga_broker_recording(received: Received) -> NatsBroker:
    broker = NatsBroker()
    for service in SAGA_SERVICES:
        module = service_module(service)
        spec = ConsumerSpec(service=service, filters=consumer_filters(module.CONSUMES))
        declare_service(broker, spec, emits=(), handler=recorder(service, received))
    return broker


def event(type_token: str) -> bytes:
    envelope = Envelope(
        type=f"work.plnt.{type_token}",
        source="/plnt/test",
        subject="default/review-responder",
        data={},
        sagaid="default.review-responder.1.1",
        generation=1,
    )
    return envelope.model_dump_json().encode()  # as Bus.publish encodes it


class Routing:
    """The saga's subscribers on one in-memory broker, and who got the last event."""

    def __init__(self, test_broker: NatsBroker, received: Received) -> None:
        self._broker = test_broker
        self._received = received

    async def reached_by(self, type_token: str) -> set[str]:
        self._received.clear()
        subject = f"{subjects.SUBJECT_PREFIX}.{type_token}.default.review-responder"
        await self._broker.publish(event(type_token), subject, stream=subjects.STREAM)
        for calls in self._received.values():
            assert calls == [(f"work.plnt.{type_token}", 1)]  # once, decoded, first delivery
        return set(self._received)


@pytest.fixture
async def routing() -> AsyncIterator[Routing]:
    received: Received = defaultdict(list)
    async with TestNatsBroker(saga_broker_recording(received)) as test_broker:
        yield Routing(test_broker, received)


async def test_each_saga_hop_reaches_its_consumers_and_the_watcher(routing: Routing) -> None:
    for event_type, consumers in SAGA_HOPS.items():
        assert consumers | {"watcher"} <= await routing.reached_by(event_type.value), event_type


async def test_each_event_type_reaches_exactly_the_services_that_list_it(routing: Routing) -> None:
    for event_type in EventType:
        expected = {
            service
            for service in SAGA_SERVICES
            if service == "watcher" or event_type in service_module(service).CONSUMES
        }
        assert await routing.reached_by(event_type.value) == expected, event_type


async def test_an_unknown_event_type_reaches_no_step_only_the_watchers_fold(
    routing: Routing,
) -> None:
    assert await routing.reached_by("run.unheard_of") == {"watcher"}
