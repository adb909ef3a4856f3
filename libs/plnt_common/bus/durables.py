"""Where a service's durable consumer starts, and how an ordered one is pinned.

- An ordered consumer's durable is a ``pinned_client`` priority group (nats-server
  2.11+; nats-py 2.x has no fields for it, hence ``PinnedConsumerConfig``): the server
  delivers to one replica at a time. A durable an older plnt made without the group
  cannot be changed into one; it is deleted and made again from its acknowledged floor.
- Every durable's acknowledged floor is recorded in ``plnt-sagas`` as
  ``position.<durable>`` (every ``POSITION_EVERY_S`` and when the service stops). A
  durable found missing (deleted by hand, lost with a server's store) is made again from
  that record, never from the start of the history, which would hand every step of every
  past saga to the service again. Only a durable that never recorded a position (its
  service's first start) starts at the stream's beginning.

What this is not: the delivery rules (``consumer``) or the configuration merge
(``provision.ensure_durable``, which writes the configuration prepared here).
"""

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from nats.errors import TimeoutError as NatsTimeout
from nats.js import api
from nats.js.errors import KeyDeletedError, KeyNotFoundError

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.errors import BusUnavailable
from plnt_common.logs import get_logger

log = get_logger(__name__)

PIN_GROUP = "plnt"
"""The priority group of an ordered consumer's durable."""
PINNED_POLICY = "pinned_client"
POSITION_EVERY_S = 30.0
"""How often a running consumer records its durable's acknowledged floor."""


@dataclass
class PinnedConsumerConfig(api.ConsumerConfig):
    """A consumer configuration with the priority group fields nats-py 2.x lacks."""

    priority_groups: list[str] | None = None
    priority_policy: str | None = None
    priority_timeout: float | None = None
    """Seconds."""

    def as_dict(self) -> dict[str, object]:
        result = super().as_dict()
        if self.priority_timeout is not None:
            result["priority_timeout"] = self._to_nanoseconds(self.priority_timeout)
        return result


def groups_supported(bus: Bus) -> bool:
    """Whether the connected server has priority groups (nats-server 2.11 or later); an
    unknown version (no server info yet) is taken for one that has them."""
    version = bus.nc.connected_server_version
    return version.major == 0 or (version.major, version.minor) >= (2, 11)


def pinned(config: api.ConsumerConfig, *, timeout_s: float) -> PinnedConsumerConfig:
    """``config`` as a pinned priority group's."""
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(api.ConsumerConfig)}
    return PinnedConsumerConfig(
        **fields,
        priority_groups=[PIN_GROUP],
        priority_policy=PINNED_POLICY,
        priority_timeout=timeout_s,
    )


def position_key(durable: str) -> str:
    return f"position.{durable}"


async def consumer_info(bus: Bus, durable: str) -> dict[str, Any] | None:
    """The durable's info as the server sends it (nats-py drops the priority fields);
    None when there is no such consumer. Raises ``BusUnavailable`` without an answer."""
    try:
        reply = await bus.nc.request(
            f"$JS.API.CONSUMER.INFO.{subjects.STREAM}.{durable}", b"", timeout=5
        )
    except NatsTimeout:
        raise BusUnavailable(f"no answer about consumer {durable}") from None
    info: dict[str, Any] = json.loads(reply.data or b"{}")
    return None if "error" in info else info


def ack_floor(info: dict[str, Any]) -> int:
    """The stream sequence up to which the consumer has every message acknowledged."""
    return int(info.get("ack_floor", {}).get("stream_seq", 0))


async def recorded_position(bus: Bus, durable: str) -> int | None:
    """The durable's last recorded acknowledged floor; None when it never recorded one."""
    try:
        entry = await bus.sagas.get(position_key(durable))
    except (KeyNotFoundError, KeyDeletedError):
        return None
    return int(entry.value or b"0")


async def record_position(bus: Bus, durable: str, *, after: int = 0) -> int:
    """Record the durable's acknowledged floor when it passed ``after``; returns it."""
    info = await consumer_info(bus, durable)
    if info is None:
        return after
    floor = ack_floor(info)
    if floor > after:
        await bus.sagas.put(position_key(durable), str(floor).encode())
    return max(floor, after)


async def prepared(bus: Bus, config: api.ConsumerConfig) -> api.ConsumerConfig:
    """``config`` made ready for ``ensure_durable``: for a missing durable, starting
    after its recorded position; a pinned one replacing an older unpinned durable."""
    durable = config.durable_name or ""
    info = await consumer_info(bus, durable)
    if info is not None:
        wanted = getattr(config, "priority_policy", None)
        if info.get("config", {}).get("priority_policy") == wanted:
            return config
        start = ack_floor(info) + 1
        await bus.js.delete_consumer(subjects.STREAM, durable)
        log.warning("consumer.repinned", durable=durable, from_sequence=start)
    else:
        position = await recorded_position(bus, durable)
        if position is None:
            return config  # the service's first start: the whole stream is for it
        start = position + 1
        log.warning("consumer.recreated", durable=durable, from_sequence=start)
    return dataclasses.replace(
        config, deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start
    )
