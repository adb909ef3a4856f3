"""``file:///abs/path`` registries: a directory tree on the puller's own file system.

Reads ``<root>/<name>/<version>/workflow.yaml`` (or a file beside it) in a worker thread
and refuses any path that resolves outside the root (through ``..`` or a symlink). It
does not watch the tree, cache anything, or decide what a missing file means for the run.
"""

import asyncio
import os
import stat
from pathlib import Path
from urllib.parse import unquote, urlsplit

from plnt_common.errors import RegistryUnavailable, SpecInvalid, SpecNotFound
from plnt_common.oci import Logins
from plnt_common.workflow import MAX_SPEC_BYTES
from plnt_puller.adapters.locations import fetch_signature_beside, refuse_logins, spec_path
from plnt_puller.ports import SPEC_FILE

READ_CHUNK = 64 * 1024


class FileRegistry:
    """Implements ``ports.Registry`` for ``file://`` URLs."""

    def __init__(self, *, max_bytes: int = MAX_SPEC_BYTES) -> None:
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
        """The file's bytes; raises ``SpecNotFound``, ``SpecInvalid`` (size) or
        ``RegistryUnavailable`` (an I/O error other than a missing or unreadable file);
        ``PullSecretInvalid`` for ``logins`` (file registries take none)."""
        refuse_logins(logins, registry=registry)
        root = _root_of(registry)
        relative = spec_path(name=name, version=version, file=file)
        bound = self._max_bytes if max_bytes is None else max_bytes
        return await asyncio.to_thread(self._read, root, relative, bound)

    async def fetch_signature(
        self, *, registry: str, name: str, version: str, logins: Logins | None = None
    ) -> bytes | None:
        """``workflow.yaml.minisig`` beside the spec, None when it is not there."""
        refuse_logins(logins, registry=registry)
        return await fetch_signature_beside(self, url=registry, name=name, version=version)

    def _read(self, root: Path, relative: str, bound: int) -> bytes:
        try:
            real_root = root.resolve(strict=True)
        except (FileNotFoundError, NotADirectoryError):
            raise SpecNotFound(f"registry directory {root} does not exist") from None
        except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
            raise SpecNotFound(f"registry directory {root} cannot be resolved: {exc}") from None
        shown = root / relative  # messages name the path as the user wrote it
        try:
            real = (real_root / relative).resolve(strict=True)
        except (FileNotFoundError, NotADirectoryError):
            raise SpecNotFound(f"{shown} not found") from None
        except (OSError, RuntimeError) as exc:
            raise SpecNotFound(f"{shown} cannot be resolved: {exc}") from None
        if not real.is_relative_to(real_root):
            raise SpecNotFound(
                f"refused {shown}: it resolves outside the registry directory {root}"
            )
        try:
            # O_NOFOLLOW: the checked path must not turn into a symlink between check and open.
            fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            raise SpecNotFound(f"{shown} not found") from None
        except PermissionError:
            raise SpecNotFound(f"{shown} is not readable by the puller") from None
        except OSError as exc:
            raise RegistryUnavailable(f"cannot open {shown}: {exc.strerror or exc}") from None
        try:
            return self._read_open(fd, shown, bound)
        finally:
            os.close(fd)

    def _read_open(self, fd: int, shown: Path, bound: int) -> bytes:
        # The checks run on the opened descriptor, so they judge the very file that is read.
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SpecNotFound(f"{shown} is not a regular file")
        if info.st_size > bound:
            raise SpecInvalid(_too_big(shown, info.st_size, bound))
        chunks: list[bytes] = []
        # One byte more than allowed: a file that grew after fstat is still caught.
        remaining = bound + 1
        try:
            while remaining > 0:
                chunk = os.read(fd, min(remaining, READ_CHUNK))
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
        except OSError as exc:
            raise RegistryUnavailable(f"cannot read {shown}: {exc.strerror or exc}") from None
        data = b"".join(chunks)
        if len(data) > bound:
            raise SpecInvalid(_too_big(shown, len(data), bound))
        return data


def _root_of(registry: str) -> Path:
    parts = urlsplit(registry)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        raise SpecNotFound(f"{registry} is not a file:///absolute/path registry")
    path = unquote(parts.path)
    if not path.startswith("/"):
        raise SpecNotFound(f"{registry} does not name an absolute path")
    return Path(path)


def _too_big(where: object, size: int, bound: int) -> str:
    return f"{where} is {size} bytes, over the {bound}-byte bound"
