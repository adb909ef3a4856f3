"""Publishes finished shadow pairs on the ``PLNT_SHADOW`` stream, one message each.

Subject ``plnt.shadow.<namespace>.<name>``; ``Nats-Msg-Id`` is the pair id and kind, so a
publish the server took but whose ack was lost is not stored twice. Publishes once and
raises ``BusUnavailable`` when the bus does not take the pair: the mirror drops and
counts it. Decides nothing about what is mirrored.
"""

from nats.aio.client import Client
from nats.errors import Error as NatsError

from plnt_common.errors import BusUnavailable
from plnt_common.shadow_pairs import ShadowPair
from plnt_common.subjects import SHADOW_STREAM, shadow_subject


class JetStreamPairPublisher:
    """``PairPublisher`` over one NATS connection."""

    def __init__(self, *, nc: Client, timeout_s: float) -> None:
        self._js = nc.jetstream()
        self._timeout_s = timeout_s

    async def publish(self, pair: ShadowPair) -> None:
        try:
            await self._js.publish(
                shadow_subject(pair.namespace, pair.name),
                pair.model_dump_json().encode(),
                timeout=self._timeout_s,
                stream=SHADOW_STREAM,
                headers={"Nats-Msg-Id": f"{pair.pair_id}.{pair.kind.value}"},
            )
        except (NatsError, TimeoutError) as exc:
            raise BusUnavailable(f"shadow pair not published: {exc!r}") from None
