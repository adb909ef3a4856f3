"""``file:///abs/path`` registries, written on the local file system.

Creates ``<root>/<name>/<version>/`` as needed and writes each file through a temporary
file renamed into place, so a reader sees the old file or the new one, never half of one.
It does not lock against a concurrent publisher of the same version.
"""

import os
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

from plnt_cli.publish_targets import Progress
from plnt_common.errors import SpecNotFound
from plnt_puller.ports import SPEC_FILE


class FileTarget:
    """Implements ``PublishTarget`` for one ``file://`` registry."""

    def __init__(self, registry: str) -> None:
        parts = urlsplit(registry)
        path = unquote(parts.path)
        if (
            parts.scheme != "file"
            or parts.netloc not in ("", "localhost")
            or not path.startswith("/")
        ):
            raise SpecNotFound(f"{registry} is not a file:///absolute/path registry")
        if ".." in path.split("/"):
            raise SpecNotFound(f"{registry}: a registry path may not hold '..'")
        self._root = Path(path)

    def _dir(self, name: str, version: str) -> Path:
        return self._root / name / version

    def published(self, *, name: str, version: str) -> dict[str, bytes] | None:
        """The regular files in ``<root>/<name>/<version>/``, None when there are none."""
        directory = self._dir(name, version)
        try:
            entries = sorted(directory.iterdir())
            files = {
                e.name: e.read_bytes()
                for e in entries
                if e.is_file() and not e.name.startswith(".")
            }
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise SpecNotFound(f"cannot read {directory}: {exc.strerror or exc}") from None
        return files or None

    def upload(
        self, *, name: str, version: str, files: dict[str, bytes], progress: Progress
    ) -> None:
        """Write ``files``, the spec last; raises ``SpecNotFound`` when the directory cannot
        be written."""
        directory = self._dir(name, version)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpecNotFound(f"cannot create {directory}: {exc.strerror or exc}") from None
        for file in sorted(files, key=lambda f: f == SPEC_FILE):
            data = files[file]
            progress(file, 0, len(data))
            _write_atomically(directory / file, data)
            progress(file, len(data), len(data))


def _write_atomically(path: Path, data: bytes) -> None:
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.chmod(temporary, 0o644)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise SpecNotFound(f"cannot write {path}: {exc.strerror or exc}") from None
