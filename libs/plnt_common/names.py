"""Name and reference rules shared by resources, subjects and release names."""

import re

from plnt_common.errors import SpecInvalid

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_RUN_NAME = 40
DEFAULT_NAMESPACE = "default"
SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
SHA256_PIN = re.compile(r"^sha256:[0-9a-f]{64}$")
DURATION = re.compile(r"^(?P<number>[0-9]+(\.[0-9]+)?)(?P<unit>ms|s|m|h)$")
DURATION_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float:
    """Seconds of a duration like ``500ms``, ``30s``, ``5m`` or ``1h``; ValueError otherwise."""
    match = DURATION.match(text)
    if match is None:
        raise ValueError(f"must be a duration like 500ms, 30s or 5m, got {text!r}")
    return float(match["number"]) * DURATION_UNITS_S[match["unit"]]


NATS_WILDCARDS = ("*", ">")


def check_dns_label(value: str, *, what: str, max_len: int = 63) -> str:
    """Return ``value`` if it is a DNS-1123 label of at most ``max_len`` characters."""
    if any(wildcard in value for wildcard in NATS_WILDCARDS):
        # Names become subject tokens and KV keys, where these two would match other runs.
        raise SpecInvalid(
            f"{what} {value!r} is not a DNS-1123 label: wildcards (* and >) are not accepted, "
            "give one exact name"
        )
    if not value:
        raise SpecInvalid(f"{what} is empty")
    if len(value) > max_len:
        raise SpecInvalid(f"{what} {value!r} is longer than {max_len} characters")
    if not DNS1123_LABEL.match(value):
        raise SpecInvalid(
            f"{what} {value!r} is not a DNS-1123 label "
            "(lowercase letters, digits and '-', starting and ending alphanumeric)"
        )
    return value


def parse_ref(ref: str) -> tuple[str, str]:
    """Split ``"<name>@<semver>"``; the name must be a DNS-1123 label so it is safe in paths."""
    name, sep, version = ref.partition("@")
    if not sep:
        raise SpecInvalid(f"workflow ref {ref!r} must look like <name>@<semver>")
    check_dns_label(name, what="workflow name in ref")
    if not SEMVER.match(version):
        raise SpecInvalid(f"workflow ref {ref!r} has version {version!r}, which is not semver")
    return name, version


def check_run_name(value: str) -> str:
    """A WorkflowRun name: a DNS-1123 label of at most ``MAX_RUN_NAME`` characters."""
    return check_dns_label(value, what="WorkflowRun name", max_len=MAX_RUN_NAME)


def check_namespace(value: str) -> str:
    return check_dns_label(value, what="namespace")
