"""Where a spec lives inside a registry: ``<name>/<version>/workflow.yaml``, and the files
published beside it (a code archive, the signature).

Shared by every registry adapter so they agree on the layout; no I/O of its own.
"""

from typing import TYPE_CHECKING

from plnt_common.errors import PullSecretInvalid, SignatureInvalid, SpecInvalid, SpecNotFound
from plnt_common.signatures import MAX_SIGNATURE_BYTES
from plnt_puller.ports import SIGNATURE_FILE, SPEC_FILE, Registry

if TYPE_CHECKING:
    from plnt_common.oci import Logins


def spec_path(*, name: str, version: str, file: str = SPEC_FILE) -> str:
    """The spec's path relative to the registry root (no leading slash); ``file`` names
    another file of the same version (a code archive beside the spec).

    ``name`` is a DNS-1123 label and ``version`` semver (``parse_ref`` checked both), so
    neither can hold ``/`` or ``..``, and a code archive's name is a plain file name (the
    Workflow model checks it); adapters still confine what they read.
    """
    return f"{name}/{version}/{file}"


def refuse_logins(logins: "Logins | None", *, registry: str) -> None:
    """Raise ``PullSecretInvalid`` when a run brings registry logins to a registry that
    takes none (file, S3): nothing a run asks for is silently ignored."""
    if logins is not None:
        raise PullSecretInvalid(
            f"{logins.source} holds OCI registry logins, but {registry} is not an oci:// "
            "registry; pullSecret applies to oci:// registries only"
        )


async def fetch_signature_beside(
    registry: Registry, *, url: str, name: str, version: str
) -> bytes | None:
    """``Registry.fetch_signature`` for registries that keep the signature as a file beside
    the spec (file, S3): the file's bytes, None when it is not there."""
    try:
        return await registry.fetch(
            registry=url,
            name=name,
            version=version,
            file=SIGNATURE_FILE,
            max_bytes=MAX_SIGNATURE_BYTES,
        )
    except SpecNotFound:
        return None
    except SpecInvalid as exc:  # over the bound: no real signature is that large
        raise SignatureInvalid(f"{SIGNATURE_FILE}: {exc}") from None
