"""The saga's AsyncAPI document: every saga service declared on one broker.

Each service's ``app`` module is the single source of what it consumes (``CONSUMES``)
and emits (``EMITS``); this module declares them through ``declare_service``, the same
function the running services use, so ``docs/asyncapi.yaml`` follows the code.
Regenerate it with ``task asyncapi``. The services are imported by name: the document
spans them all, while no service imports another.
"""

import importlib
from collections.abc import Iterable
from types import ModuleType

from faststream import FastStream
from faststream.nats import NatsBroker
from faststream.specification import AsyncAPI

from plnt_common import subjects
from plnt_common.bus.consumer import ConsumerSpec, Delivery
from plnt_common.bus.service_app import declare_service
from plnt_common.events import Envelope, EventType

SAGA_SERVICES = ("watcher", "puller", "installer", "smoke", "promoter")
TITLE = "plnt saga events"
VERSION = "1.0.0"
DESCRIPTION = (
    "The saga's events on the JetStream stream PLNT_EVENTS, subject "
    "plnt.evt.<type>.<namespace>.<name>, each a CloudEvents 1.0 envelope. Each saga "
    "service consumes through one durable pull consumer (plnt-<service>) its replicas "
    "share; a program that follows the saga makes a durable of its own."
)


def service_module(service: str) -> ModuleType:
    return importlib.import_module(f"plnt_{service}.app")


def consumer_filters(consumes: Iterable[EventType | str]) -> tuple[str, ...]:
    """Filter subjects of a ``CONSUMES`` tuple: event types, or subjects as they are."""
    return tuple(
        subjects.event_filter(item) if isinstance(item, EventType) else item for item in consumes
    )


async def _documented_only(envelope: Envelope, delivery: Delivery) -> None:
    del envelope, delivery  # this broker is never started


def saga_broker() -> NatsBroker:
    """A broker declaring every saga service's subscriber and publishers."""
    broker = NatsBroker()
    for service in SAGA_SERVICES:
        module = service_module(service)
        spec = ConsumerSpec(service=module.SERVICE, filters=consumer_filters(module.CONSUMES))
        declare_service(broker, spec, emits=tuple(module.EMITS), handler=_documented_only)
    return broker


def saga_app() -> FastStream:
    """The document's app; ``faststream docs gen --factory`` calls this."""
    broker = saga_broker()
    specification = AsyncAPI(broker, title=TITLE, version=VERSION, description=DESCRIPTION)
    return FastStream(broker, specification=specification)


def saga_asyncapi_yaml() -> str:
    return saga_app().schema.to_specification().to_yaml()
