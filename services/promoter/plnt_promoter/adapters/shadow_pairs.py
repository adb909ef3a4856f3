"""Reads one workflow's mirrored pairs back from the ``PLNT_SHADOW`` stream.

Each check of the shadow phase reads the run's subject anew from the phase's start with an
ephemeral reader (no acks, nothing kept on the server), so a promoter restarted mid-phase,
or another replica, judges the same pairs. Pairs of other sagas are the caller's to drop.
"""

from datetime import datetime, timedelta

from nats.js import api
from nats.js.errors import NotFoundError
from pydantic import ValidationError

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_batches
from plnt_common.logs import get_logger
from plnt_common.shadow_pairs import ShadowPair

log = get_logger(__name__)

CLOCK_SLACK = timedelta(seconds=30)
"""Read from this much before the phase started: the router's clock may run behind."""


async def read_pairs(bus: Bus, *, namespace: str, name: str, since: datetime) -> list[ShadowPair]:
    """The run's pairs stored from ``since`` (less ``CLOCK_SLACK``), oldest first; none
    when the stream does not exist yet. Raises ``BusUnavailable`` when the server does not
    answer; a message that is not a pair is logged and skipped."""
    config = api.ConsumerConfig(
        ack_policy=api.AckPolicy.NONE,
        deliver_policy=api.DeliverPolicy.BY_START_TIME,
        opt_start_time=since - CLOCK_SLACK,
        filter_subject=subjects.shadow_subject(namespace, name),
        inactive_threshold=30.0,
        mem_storage=True,
    )
    pairs: list[ShadowPair] = []
    try:
        async for batch in read_batches(
            bus.nc, stream=subjects.SHADOW_STREAM, config=config, keep=lambda msg: msg.data
        ):
            for raw in batch:
                try:
                    pairs.append(ShadowPair.model_validate_json(raw))
                except ValidationError as exc:
                    log.warning("shadow.pair_undecodable", error=str(exc).splitlines()[0])
    except NotFoundError:
        log.warning("shadow.no_stream", stream=subjects.SHADOW_STREAM)
    return pairs
