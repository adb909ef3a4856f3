"""One ``Registry`` over several: picks the adapter by the registry URL's scheme.

``file://``, ``s3://`` and ``oci://`` have adapters; another scheme is refused with a
clear, non-retryable ``SpecNotFound``. This module imports no I/O library itself.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from plnt_common.errors import SpecNotFound
from plnt_puller.ports import SPEC_FILE, Registry

if TYPE_CHECKING:
    from plnt_common.oci import Logins


class RegistryByScheme:
    """Implements ``ports.Registry`` by delegating to ``adapters[scheme]``."""

    def __init__(self, *, adapters: Mapping[str, Registry]) -> None:
        self._adapters = dict(adapters)

    async def fetch(
        self,
        *,
        registry: str,
        name: str,
        version: str,
        file: str = SPEC_FILE,
        max_bytes: int | None = None,
        logins: "Logins | None" = None,
    ) -> bytes:
        """What the scheme's adapter returns or raises; ``SpecNotFound`` for other schemes."""
        return await self._adapter(registry).fetch(
            registry=registry,
            name=name,
            version=version,
            file=file,
            max_bytes=max_bytes,
            logins=logins,
        )

    async def fetch_signature(
        self, *, registry: str, name: str, version: str, logins: "Logins | None" = None
    ) -> bytes | None:
        """What the scheme's adapter returns or raises; ``SpecNotFound`` for other schemes."""
        return await self._adapter(registry).fetch_signature(
            registry=registry, name=name, version=version, logins=logins
        )

    def _adapter(self, registry: str) -> Registry:
        scheme = urlsplit(registry).scheme
        adapter = self._adapters.get(scheme)
        if adapter is None:
            supported = " or ".join(f"{s}://" for s in sorted(self._adapters, reverse=True))
            what = f"{scheme}:// registries are" if scheme else f"registry {registry!r} is"
            raise SpecNotFound(f"{what} not supported yet; use {supported}")
        return adapter
