"""Workflow code for tests: gzip tar archives as ``runtime.code`` pins them, and tiny
wheels pip installs offline (``PIP_NO_INDEX=1``, ``PIP_FIND_LINKS=<dir>``).

Everything is built in memory or in a given directory, reproducibly (mtime 0), with the
standard library only: nothing is downloaded.
"""

import base64
import gzip
import hashlib
import io
import tarfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from plnt_common.code_archive import archive_digest, pack_archive


def code_archive(files: Mapping[str, str | bytes], *, raw_members: bool = False) -> bytes:
    """A gzip tar holding ``files`` (path -> content) at its root, the same bytes for the
    same files. ``raw_members`` writes the names as given (absolute, ``..``): for archives
    the readers must refuse."""
    if not raw_members:
        return pack_archive(
            {
                name.lstrip("/"): content.encode() if isinstance(content, str) else content
                for name, content in files.items()
            }
        )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in sorted(files):
            content = files[name]
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(name if raw_members else name.lstrip("/"))
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            archive.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), mtime=0)


def archive_with_symlink(name: str, target: str) -> bytes:
    """A gzip tar holding one symbolic link: readers must refuse it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.type = tarfile.SYMTYPE
        info.linkname = target
        archive.addfile(info)
    return gzip.compress(buffer.getvalue(), mtime=0)


def publish_code(
    registry: Path, *, name: str, version: str, archive: bytes, file: str = "code.tar.gz"
) -> str:
    """Write ``archive`` beside ``<name>/<version>/workflow.yaml``; returns its digest."""
    target = registry / name / version / file
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(archive)
    return archive_digest(archive)


def build_wheel(
    directory: Path, *, name: str = "plnt_testwheel", version: str = "1.0.0", source: str = ""
) -> Path:
    """A pure-Python wheel of one module ``name`` (``source`` its text) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": (source or f'VERSION = "{version}"\n').encode(),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            "Summary: a module plnt's tests install offline\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: plnt-testkit\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record = [f"{path},sha256={_hash(data)},{len(data)}" for path, data in files.items()]
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            archive.writestr(info, data)
    return wheel


def offline_pip_env(wheels: Path) -> dict[str, str]:
    """The environment that makes pip install from ``wheels`` only, downloading nothing."""
    return {
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheels),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_CACHE_DIR": "1",
    }


def _hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
