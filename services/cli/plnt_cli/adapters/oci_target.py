"""``oci://host[:port]/path`` registries, written through the OCI distribution API.

A version is the artifact ``host[:port]/path/<name>:<version>`` (``plnt_common.oci``
describes its layout): each file is a layer named by its title, the blobs are pushed
first and the manifest, tagged with the version, last, so a reader sees the old artifact
or the new one, never a spec whose archive or signature is missing. Reaches the registry
as the puller does: the same docker ``config.json`` credentials, the same insecure
registries (``PLNT_PULLER_OCI_*``). It does not delete blobs a replaced manifest no longer
names (the registry's garbage collection does).
"""

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from plnt_cli.publish_targets import Progress
from plnt_common.code_archive import MAX_ARCHIVE_BYTES
from plnt_common.errors import SpecNotFound
from plnt_common.oci import (
    CODE_MEDIA_TYPE,
    EMPTY_CONFIG,
    SIGNATURE_MEDIA_TYPE,
    WORKFLOW_MEDIA_TYPE,
    Blob,
    OciClient,
    descriptor,
    docker_config_file,
    image_manifest,
    locate,
)
from plnt_puller.ports import SIGNATURE_FILE, SPEC_FILE
from plnt_puller.settings import PullerSettings

T = TypeVar("T")


def media_type_of(file: str) -> str:
    """The layer media type of a published file: the spec, its signature, else code."""
    if file == SPEC_FILE:
        return WORKFLOW_MEDIA_TYPE
    if file == SIGNATURE_FILE:
        return SIGNATURE_MEDIA_TYPE
    return CODE_MEDIA_TYPE


class OciTarget:
    """Implements ``PublishTarget`` for one ``oci://`` registry."""

    def __init__(self, registry: str, *, client: OciClient | None = None) -> None:
        locate(registry, name="check", version="0.0.0")  # raises SpecNotFound when malformed
        self._registry = registry
        if client is None:
            settings = PullerSettings()
            client = OciClient(
                insecure=settings.oci_insecure_registries,
                docker_config=docker_config_file(settings.oci_docker_config, home=Path.home()),
                attempts=2,
                connect_timeout_s=5.0,
                read_timeout_s=60.0,
            )
        self._client = client

    def published(self, *, name: str, version: str) -> dict[str, bytes] | None:
        """Every layer of the artifact by its title, None when the tag does not exist."""
        return _run(self._published(name, version))

    def upload(
        self, *, name: str, version: str, files: dict[str, bytes], progress: Progress
    ) -> None:
        """Push ``files`` as layers, keep the artifact's other layers, tag the new manifest."""
        _run(self._upload(name, version, files, progress))

    async def _published(self, name: str, version: str) -> dict[str, bytes] | None:
        artifact = locate(self._registry, name=name, version=version)
        manifest = await self._client.manifest(artifact)
        if manifest is None:
            return None
        return {
            _title(layer): await self._client.blob(artifact, layer, max_bytes=MAX_ARCHIVE_BYTES)
            for layer in manifest.layers
        }

    async def _upload(
        self, name: str, version: str, files: dict[str, bytes], progress: Progress
    ) -> None:
        artifact = locate(self._registry, name=name, version=version)
        existing = await self._client.manifest(artifact)
        layers: dict[str, dict[str, Any]] = {}
        for layer in existing.layers if existing is not None else ():
            layers[_title(layer)] = {
                "mediaType": layer.media_type,
                "digest": layer.digest,
                "size": layer.size,
                "annotations": {"org.opencontainers.image.title": _title(layer)},
            }
        for file in sorted(files, key=lambda f: f == SPEC_FILE):
            data = files[file]
            progress(file, 0, len(data))
            await self._client.push_blob(artifact, data)
            layers[file] = descriptor(media_type_of(file), data, title=file)
            progress(file, len(data), len(data))
        await self._client.push_blob(artifact, EMPTY_CONFIG)
        # The spec's layer first: tools that show one layer show the workflow.
        ordered = sorted(layers.items(), key=lambda item: (item[0] != SPEC_FILE, item[0]))
        await self._client.push_manifest(artifact, image_manifest([d for _, d in ordered]))


def _title(layer: Blob) -> str:
    if layer.title is not None:
        return layer.title
    if layer.media_type == WORKFLOW_MEDIA_TYPE:
        return SPEC_FILE
    if layer.media_type == SIGNATURE_MEDIA_TYPE:
        return SIGNATURE_FILE
    raise SpecNotFound(f"a layer of media type {layer.media_type} has no title annotation")


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end from synchronous code, in a thread of its own when the
    caller already runs an event loop (a test, a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
