"""Where ``plnt publish`` writes: the ``PublishTarget`` port and ``target_for``, its dispatch
by the registry URL's scheme.

A target holds the files of one published version, ``<registry>/<name>/<version>/``:
``workflow.yaml``, ``workflow.yaml.minisig`` (when signed) and the code archive named by
``runtime.code.archive``. Targets do what they are told: deciding whether a version may be
replaced is ``plnt_cli.publish``'s job. Every infrastructure error leaves a target as a
``plnt_common.errors`` type raised ``from None``: ``RegistryUnavailable`` (no answer, a
broken upload), ``SpecNotFound`` (the registry answered and refused: no such bucket or
directory, access denied, a malformed URL).
"""

from collections.abc import Callable
from typing import Protocol
from urllib.parse import urlsplit

from plnt_common.errors import SpecNotFound

Progress = Callable[[str, int, int], None]
"""Called as ``progress(file, sent_bytes, total_bytes)`` while ``file`` uploads, and once
more when it is complete (``sent_bytes == total_bytes``)."""


class PublishTarget(Protocol):
    """One registry, seen from the publishing side."""

    def published(self, *, name: str, version: str) -> dict[str, bytes] | None:
        """The files published for ``name@version`` (file name -> bytes), None when
        nothing is published there.

        Raises ``RegistryUnavailable`` when the registry did not answer, ``SpecNotFound``
        when it refused to be read.
        """
        ...

    def upload(
        self, *, name: str, version: str, files: dict[str, bytes], progress: Progress
    ) -> None:
        """Write ``files`` for ``name@version``, replacing any file of the same name; the
        spec (``workflow.yaml``) is written last, so a reader never finds a spec whose
        archive or signature is not there yet.

        Raises ``RegistryUnavailable`` or ``SpecNotFound`` as ``published`` does.
        """
        ...


def target_for(registry: str) -> PublishTarget:
    """The target for ``registry`` (``file:///abs/path``, ``s3://bucket[/prefix]``);
    raises ``SpecNotFound`` for a scheme that cannot be published to."""
    scheme = urlsplit(registry).scheme
    # Imported here so that `plnt` starts without boto3 unless it publishes to S3.
    if scheme == "file":
        from plnt_cli.adapters.file_target import FileTarget

        return FileTarget(registry)
    if scheme == "s3":
        from plnt_cli.adapters.s3_target import S3Target

        return S3Target(registry)
    if scheme == "oci":
        from plnt_cli.adapters.oci_target import OciTarget

        return OciTarget(registry)
    raise SpecNotFound(
        f"cannot publish to {registry!r}: use file:///abs/path, s3://bucket[/prefix] or oci://"
    )
