"""Where a spec lives inside a registry: ``<name>/<version>/workflow.yaml``.

Shared by every registry adapter so they agree on the layout; no I/O here.
"""

SPEC_FILE = "workflow.yaml"


def spec_path(*, name: str, version: str) -> str:
    """The spec's path relative to the registry root (no leading slash).

    ``name`` is a DNS-1123 label and ``version`` semver (``parse_ref`` checked both), so
    neither can hold ``/`` or ``..``; adapters still confine what they read.
    """
    return f"{name}/{version}/{SPEC_FILE}"
