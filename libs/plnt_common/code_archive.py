"""A workflow's code archive (``spec.runtime.code``): the checks every reader makes.

The archive is a gzip-compressed tar whose contents are the code's root. The puller
checks it before storing it, the local backend again before unpacking it: the bytes
must hash to the pinned digest, be a gzip tar, and hold only regular files and
directories whose paths stay inside the directory they are unpacked into (no absolute
path, no ``..``, no links or devices), within the size bounds below. It reads bytes in
memory only: no files, no network; unpacking is the local backend's.
"""

import gzip
import hashlib
import io
import tarfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from plnt_common.errors import CodeInvalid

MAX_ARCHIVE_BYTES = 64 * 1024 * 1024
"""Bound of an archive's (compressed) bytes: it travels through the plnt-specs object store."""

MAX_UNPACKED_BYTES = 512 * 1024 * 1024
"""Bound of the files' total size once unpacked (a gzip bomb is refused before unpacking)."""

MAX_MEMBERS = 20_000
"""Bound of the number of files and directories in an archive."""

_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class ArchiveSummary:
    """What a checked archive holds."""

    files: int
    unpacked_bytes: int


def archive_digest(data: bytes) -> str:
    """``sha256:<hex>`` of the archive's bytes, as ``runtime.code.digest`` pins it."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def check_archive(data: bytes, *, digest: str, name: str = "archive") -> ArchiveSummary:
    """Check ``data`` against ``digest`` and the archive rules; raises ``CodeInvalid``.

    ``name`` is how messages call the archive (its file name in the registry).
    """
    if len(data) > MAX_ARCHIVE_BYTES:
        raise CodeInvalid(f"{name} is {len(data)} bytes, over the {MAX_ARCHIVE_BYTES}-byte bound")
    actual = archive_digest(data)
    if actual != digest:
        raise CodeInvalid(f"{name} does not match its digest: pinned {digest}, fetched {actual}")
    if not data.startswith(_GZIP_MAGIC):
        raise CodeInvalid(f"{name} is not a gzip-compressed tar archive")
    files = 0
    total = 0
    members = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            for member in archive:
                members += 1
                if members > MAX_MEMBERS:
                    raise CodeInvalid(f"{name} holds more than {MAX_MEMBERS} members")
                problem = member_problem(member)
                if problem:
                    raise CodeInvalid(f"{name}: member {member.name!r} {problem}")
                if member.isfile():
                    files += 1
                    total += member.size
                    if total > MAX_UNPACKED_BYTES:
                        raise CodeInvalid(f"{name} unpacks to more than {MAX_UNPACKED_BYTES} bytes")
    except (tarfile.TarError, EOFError, OSError, zlib.error, gzip.BadGzipFile) as exc:
        raise CodeInvalid(f"{name} is not a readable gzip tar archive: {exc}") from None
    return ArchiveSummary(files=files, unpacked_bytes=total)


def member_problem(member: tarfile.TarInfo) -> str:
    """Why ``member`` may not be unpacked; "" when it may."""
    path = PurePosixPath(member.name)
    if member.name.startswith("/") or path.is_absolute():
        return "has an absolute path"
    if ".." in path.parts:
        return "climbs out of the archive's root with '..'"
    if "\\" in member.name or "\x00" in member.name:
        return "has a backslash or NUL in its path"
    if not (member.isfile() or member.isdir()):
        return "is not a regular file or directory (links and devices are refused)"
    return ""


def pack_archive(files: Mapping[str, bytes]) -> bytes:
    """A gzip tar holding ``files`` (relative POSIX path -> bytes) at its root, the same
    bytes for the same files: members sorted by path, regular files only, mode 0644,
    mtime 0, owner 0:0 without names, and a gzip header without a time or file name.

    What ``plnt publish`` packs a workflow's ``src/`` into; raises ``CodeInvalid`` for a
    path ``check_archive`` would refuse.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in sorted(files):
            data = files[path]
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            problem = member_problem(info)
            if problem:
                raise CodeInvalid(f"cannot pack {path!r}: it {problem}")
            archive.addfile(info, io.BytesIO(data))
    raw = buffer.getvalue()
    compressed = io.BytesIO()
    # GzipFile with an empty file name and mtime 0: the header holds nothing that varies.
    with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=9) as out:
        out.write(raw)
    return compressed.getvalue()
