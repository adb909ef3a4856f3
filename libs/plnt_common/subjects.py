"""Subjects, durable consumer names, stream and bucket names: spelled here and nowhere else."""

from plnt_common.events import EventType

STREAM = "PLNT_EVENTS"
SUBJECT_PREFIX = "plnt.evt"
STREAM_SUBJECTS = (f"{SUBJECT_PREFIX}.>",)

DEAD_LETTER_STREAM = "PLNT_DEAD_LETTERS"
DEAD_LETTER_SUBJECTS = (f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{STREAM}.>",)
"""The server's advisory for every message a consumer terminated (exhausted or poison)."""

RUNS_BUCKET = "plnt-runs"
ROUTES_BUCKET = "plnt-routes"
RESOURCES_BUCKET = "plnt-resources"
RELEASES_BUCKET = "plnt-releases"
SAGAS_BUCKET = "plnt-sagas"
SPECS_OBJECT_STORE = "plnt-specs"


def event_subject(event_type: EventType, namespace: str, name: str) -> str:
    """``plnt.evt.<type>.<namespace>.<name>``; names are DNS-1123 labels, so no wildcards."""
    return f"{SUBJECT_PREFIX}.{event_type.value}.{namespace}.{name}"


def event_filter(event_type: EventType) -> str:
    """Every subject of one event type, for a consumer's filter."""
    return f"{SUBJECT_PREFIX}.{event_type.value}.>"


def run_filter(namespace: str, name: str) -> str:
    """Every event of one run, whatever its type (``plnt history``)."""
    return f"{SUBJECT_PREFIX}.*.*.{namespace}.{name}"


def durable_name(service: str) -> str:
    """The one durable pull consumer all replicas of a service share."""
    return f"plnt-{service}"
