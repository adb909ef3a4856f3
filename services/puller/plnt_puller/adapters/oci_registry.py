"""``oci://host[:port]/path`` registries: a workflow version is the OCI artifact
``host[:port]/path/<name>:<version>`` (``plnt_common.oci`` describes its layout).

``workflow.yaml`` is the layer of media type ``application/vnd.microagents.workflow.v1+yaml``
(so the spec's ``integrityHash`` is that layer's digest), the code archive the
``application/vnd.microagents.code.v1.tar+gzip`` layer whose title is the archive's name,
and the signature the ``application/vnd.microagents.signature.v1+minisign`` layer. Retries,
credentials and the HTTP-or-HTTPS decision are the client's; this adapter picks layers and
translates what is missing. It does not cache manifests or follow manifest lists.
"""

from plnt_common.errors import SignatureInvalid, SpecInvalid, SpecNotFound
from plnt_common.oci import (
    CODE_MEDIA_TYPE,
    SIGNATURE_MEDIA_TYPE,
    WORKFLOW_MEDIA_TYPE,
    Artifact,
    Blob,
    Logins,
    Manifest,
    OciClient,
    locate,
)
from plnt_common.signatures import MAX_SIGNATURE_BYTES
from plnt_common.workflow import MAX_SPEC_BYTES
from plnt_puller.ports import SIGNATURE_FILE, SPEC_FILE


class OciRegistry:
    """Implements ``ports.Registry`` for ``oci://`` URLs."""

    def __init__(self, *, client: OciClient, max_bytes: int = MAX_SPEC_BYTES) -> None:
        self._client = client
        self._max_bytes = max_bytes

    async def fetch(
        self,
        *,
        registry: str,
        name: str,
        version: str,
        file: str = SPEC_FILE,
        max_bytes: int | None = None,
        logins: Logins | None = None,
    ) -> bytes:
        """The bytes of the layer holding ``file``; raises ``SpecNotFound`` (no such
        artifact or layer, a refusal), ``SpecInvalid`` (over the bound) or
        ``RegistryUnavailable`` once the client's retries are spent (401 included).
        ``logins`` (the run's pull secret) win over the docker config for their hosts."""
        artifact = locate(registry, name=name, version=version)
        manifest = await self._manifest(artifact, logins)
        layer = _layer_of(manifest, file)
        if layer is None:
            raise SpecNotFound(f"{artifact.reference} has no layer holding {file}")
        bound = self._max_bytes if max_bytes is None else max_bytes
        return await self._client.blob(artifact, layer, max_bytes=bound, logins=logins)

    async def fetch_signature(
        self, *, registry: str, name: str, version: str, logins: Logins | None = None
    ) -> bytes | None:
        """The signature layer's bytes, None when the artifact has none."""
        artifact = locate(registry, name=name, version=version)
        layer = _layer_of(await self._manifest(artifact, logins), SIGNATURE_FILE)
        if layer is None:
            return None
        try:
            return await self._client.blob(
                artifact, layer, max_bytes=MAX_SIGNATURE_BYTES, logins=logins
            )
        except SpecInvalid as exc:  # over the bound: no real signature is that large
            raise SignatureInvalid(f"{SIGNATURE_FILE}: {exc}") from None

    async def _manifest(self, artifact: Artifact, logins: Logins | None) -> Manifest:
        manifest = await self._client.manifest(artifact, logins=logins)
        if manifest is None:
            raise SpecNotFound(f"{artifact.reference} not found (no such repository or tag)")
        return manifest


def _layer_of(manifest: Manifest, file: str) -> Blob | None:
    """The layer holding ``file``: the spec and the signature by media type, a code archive
    by media type and title. Several candidates are ambiguous and refused."""
    if file == SPEC_FILE:
        candidates = [b for b in manifest.layers if b.media_type == WORKFLOW_MEDIA_TYPE]
    elif file == SIGNATURE_FILE:
        candidates = [b for b in manifest.layers if b.media_type == SIGNATURE_MEDIA_TYPE]
    else:
        candidates = [
            b for b in manifest.layers if b.media_type == CODE_MEDIA_TYPE and b.title == file
        ]
    if len(candidates) > 1:
        raise SpecNotFound(f"the artifact has {len(candidates)} layers for {file}: ambiguous")
    return candidates[0] if candidates else None
