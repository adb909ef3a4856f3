"""Subjects, durable consumer names, stream and bucket names: spelled here and nowhere else."""

from plnt_common.events import EventType

STREAM = "PLNT_EVENTS"
SUBJECT_PREFIX = "plnt.evt"
STREAM_SUBJECTS = (f"{SUBJECT_PREFIX}.>",)

DEAD_LETTER_STREAM = "PLNT_DEAD_LETTERS"
DEAD_LETTER_SUBJECTS = (f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{STREAM}.>",)
"""The server's advisory for every message a consumer terminated (exhausted or poison)."""

SHADOW_STREAM = "PLNT_SHADOW"
SHADOW_PREFIX = "plnt.shadow"
SHADOW_SUBJECTS = (f"{SHADOW_PREFIX}.>",)
"""Shadow pairs the router mirrored (``plnt_common.shadow_pairs.ShadowPair``)."""

RUNS_BUCKET = "plnt-runs"
ROUTES_BUCKET = "plnt-routes"
RESOURCES_BUCKET = "plnt-resources"
RELEASES_BUCKET = "plnt-releases"
SAGAS_BUCKET = "plnt-sagas"
CAPACITY_BUCKET = "plnt-capacity"
"""Per PlntBackend (key: its name) the free GPUs per class and the placements reserving
some (key: ``reservations.<backend>``); the installer writes, everyone reads."""
SPECS_OBJECT_STORE = "plnt-specs"

ROUTER_FIGURES_PREFIX = "plnt.figures.router"
"""Core NATS (not the stream): each router's cumulative call totals, about once a second."""


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


def router_figures_subject(namespace: str, name: str) -> str:
    """``plnt.figures.router.<namespace>.<name>``: one workflow's totals from one router."""
    return f"{ROUTER_FIGURES_PREFIX}.{namespace}.{name}"


def router_figures_filter() -> str:
    """Every workflow's router totals, for a reader that follows them all."""
    return f"{ROUTER_FIGURES_PREFIX}.>"


def shadow_subject(namespace: str, name: str) -> str:
    """``plnt.shadow.<namespace>.<name>``: one workflow's mirrored pairs."""
    return f"{SHADOW_PREFIX}.{namespace}.{name}"
