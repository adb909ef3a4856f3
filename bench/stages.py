"""Where a one-at-a-time deploy's time goes: each saga step, on the server's own clock.

Every message the server stores carries the time it was stored. The apply and the
``Ready`` status are revisions of the run's key in ``plnt-resources``, and each step
ends when its event is stored, so the gap between two stored marks is one service's
share of the deploy: the delivery of the event before, the handler, and the publish of
its own event. Read after the deploys, from the stream and the bucket, so measuring
adds nothing to them.
"""

import json
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from statistics import median

from nats.aio.client import Client
from nats.aio.msg import Msg

from plnt_common import subjects
from plnt_common.bus.history import read_batches, reader_config
from plnt_common.bus.kv_batch import bucket_stream, key_prefix
from plnt_common.resource_store import object_key

APPLIED = "applied"
READY = "Ready"
STAGES = (
    ("watcher (apply → run.requested)", APPLIED, "run.requested"),
    ("puller", "run.requested", "spec.pulled"),
    ("installer", "spec.pulled", "canary.installed"),
    ("smoke (with its call)", "canary.installed", "smoke.passed"),
    ("promoter", "smoke.passed", "run.ready"),
    ("watcher (run.ready → Ready)", "run.ready", READY),
)
"""(the stage, the mark it starts at, the mark it ends at), in saga order."""

Mark = tuple[str, str, float]
"""(run name, what was stored, when: seconds on the server's clock)."""


def stage_durations(marks: Iterable[Mark]) -> dict[str, list[float]]:
    """Each stage's duration (seconds) per run that has both of its marks; a mark seen
    twice (a redelivered step publishing again) counts at its first store."""
    first: dict[str, dict[str, float]] = defaultdict(dict)
    for run, mark, stored in marks:
        first[run][mark] = min(stored, first[run].get(mark, stored))
    durations: dict[str, list[float]] = {stage: [] for stage, _, _ in STAGES}
    for times in first.values():
        for stage, start, end in STAGES:
            if start in times and end in times:
                durations[stage].append(times[end] - times[start])
    return durations


async def stored_marks(nc: Client, namespace: str, names: set[str]) -> list[Mark]:
    """The marks of the runs ``names``: each event's store, the apply (the key's first
    revision) and the first ``Ready`` status."""
    marks: list[Mark] = []
    async for batch in read_batches(
        nc,
        stream=subjects.STREAM,
        config=reader_config(f"{subjects.SUBJECT_PREFIX}.>"),
        keep=_stored,
    ):
        for subject, _, stored in batch:
            event_type, event_namespace, name = _event_of(subject)
            if event_namespace == namespace and name in names:
                marks.append((name, event_type, stored))
    keys = {object_key("WorkflowRun", namespace, name): name for name in names}
    prefix = key_prefix(subjects.RESOURCES_BUCKET)
    seen: set[str] = set()
    async for batch in read_batches(
        nc,
        stream=bucket_stream(subjects.RESOURCES_BUCKET),
        config=reader_config(f"{prefix}{object_key('WorkflowRun', namespace, '*')}"),
        keep=_stored,
    ):
        for subject, data, stored in batch:
            name = keys.get(subject.removeprefix(prefix), "")
            if not name:
                continue
            if name not in seen:
                seen.add(name)
                marks.append((name, APPLIED, stored))
            if data and (json.loads(data).get("status") or {}).get("phase") == READY:
                marks.append((name, READY, stored))
    return marks


def _stored(msg: Msg) -> tuple[str, bytes, float]:
    stored: datetime = msg.metadata.timestamp
    return msg.subject, msg.data, stored.timestamp()


def _event_of(subject: str) -> tuple[str, str, str]:
    """(type, namespace, name) of ``plnt.evt.<type>.<namespace>.<name>``; the type has
    two tokens, the names none."""
    head, namespace, name = subject.rsplit(".", 2)
    return head.removeprefix(f"{subjects.SUBJECT_PREFIX}."), namespace, name


def describe(durations: dict[str, list[float]], round_trip: float) -> str:
    """Each stage's p50 in ms and in round trips of ``round_trip`` seconds."""
    return "; ".join(
        f"{stage} {median(samples) * 1000:.1f} ms ({median(samples) / round_trip:.0f})"
        for stage, samples in durations.items()
        if samples
    )
