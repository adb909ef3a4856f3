"""Where a spec lives inside a registry: ``<name>/<version>/workflow.yaml``, and the files
published beside it (a code archive).

Shared by every registry adapter so they agree on the layout; no I/O here.
"""

from plnt_puller.ports import SPEC_FILE


def spec_path(*, name: str, version: str, file: str = SPEC_FILE) -> str:
    """The spec's path relative to the registry root (no leading slash); ``file`` names
    another file of the same version (a code archive beside the spec).

    ``name`` is a DNS-1123 label and ``version`` semver (``parse_ref`` checked both), so
    neither can hold ``/`` or ``..``, and a code archive's name is a plain file name (the
    Workflow model checks it); adapters still confine what they read.
    """
    return f"{name}/{version}/{file}"
