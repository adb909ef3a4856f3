"""The on-disk directory of one release: ``<data_dir>/releases/<namespace>/<release>/``.

It holds ``workflow.yaml`` (the spec the runner serves), ``runner.log`` (the runner's
stdout and stderr), ``runner.pid`` (the pid alone, for people and ``stop_all_runners``)
and ``launch.json`` (pid, URL and launch fingerprint, for adoption after a restart of
the local-backend). Writes are atomic (temporary file + rename) so a crash never leaves
a half-written pid. This module reads and writes files; it does not start or signal
processes.
"""

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from plnt_common.logs import get_logger
from plnt_local_backend.launch import LaunchRecord
from plnt_local_backend.logic import ReleaseKey, last_lines, parse_release_key

log = get_logger(__name__)

RELEASES_DIR = "releases"
WORKFLOW_FILE = "workflow.yaml"
LOG_FILE = "runner.log"
PID_FILE = "runner.pid"
LAUNCH_FILE = "launch.json"


@dataclass(frozen=True)
class ReleaseDir:
    """Paths and file operations of one release under ``data_dir``."""

    data_dir: Path
    key: ReleaseKey

    @property
    def path(self) -> Path:
        return self.data_dir / RELEASES_DIR / self.key.namespace / self.key.release

    @property
    def workflow_file(self) -> Path:
        return self.path / WORKFLOW_FILE

    @property
    def log_file(self) -> Path:
        return self.path / LOG_FILE

    @property
    def pid_file(self) -> Path:
        return self.path / PID_FILE

    @property
    def launch_file(self) -> Path:
        return self.path / LAUNCH_FILE

    def write_workflow(self, raw: bytes) -> None:
        """Create the directory and write the spec the runner will serve."""
        self.path.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.workflow_file, raw)

    def write_launch(self, record: LaunchRecord) -> None:
        """Record a started runner: ``launch.json`` first, then ``runner.pid``.

        ``stop_all_runners`` needs only the pid file, adoption prefers the launch record;
        with both written right after the spawn, either one finds the process.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.launch_file, record.model_dump_json(indent=2).encode())
        _write_atomic(self.pid_file, f"{record.pid}\n".encode())

    def read_launch(self) -> LaunchRecord | None:
        """The launch record, or None when there is none or it cannot be parsed."""
        try:
            return LaunchRecord.model_validate_json(self.launch_file.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValidationError) as exc:
            log.warning("release_dir.unreadable_launch", path=str(self.launch_file), error=str(exc))
            return None

    def read_pid(self) -> int | None:
        """The pid in ``runner.pid``; None when there is none or it is not a positive number."""
        return read_pid_file(self.pid_file)

    def last_log_lines(self, *, count: int = 5, max_chars: int = 600) -> str:
        """The last non-empty lines the runner wrote (often why it exited: a traceback's
        end), joined with " | "; "" when none."""
        try:
            with self.log_file.open("rb") as stream:
                stream.seek(max(0, stream.seek(0, os.SEEK_END) - 4096))
                tail = stream.read().decode(errors="replace")
        except OSError:
            return ""
        return last_lines(tail, count=count, max_chars=max_chars)

    def clear_launch(self) -> None:
        """Forget the runner (it is gone): remove the pid file and the launch record."""
        for path in (self.pid_file, self.launch_file):
            path.unlink(missing_ok=True)

    def remove(self) -> None:
        """Remove the whole release directory, and the namespace directory once empty."""
        shutil.rmtree(self.path, ignore_errors=True)
        with contextlib.suppress(OSError):  # not empty: other releases of the namespace
            self.path.parent.rmdir()


def read_pid_file(path: Path) -> int | None:
    """The pid in ``path``; None when the file is missing or does not hold a positive integer."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def release_dirs(data_dir: Path) -> list[ReleaseDir]:
    """Every release directory under ``data_dir`` whose names are valid release names."""
    root = data_dir / RELEASES_DIR
    found: list[ReleaseDir] = []
    for path in sorted(root.glob("*/*")):
        key = parse_release_key(f"dir.{path.parent.name}.{path.name}", prefix="dir")
        if key is not None and path.is_dir():
            found.append(ReleaseDir(data_dir=data_dir, key=key))
    return found


def backend_dirs(data_dir: Path) -> list[Path]:
    """The state dirs of the per-backend processes sharing ``data_dir``
    (``<data_dir>/<backend>/releases/``)."""
    if not data_dir.is_dir():
        return []
    return sorted(p for p in data_dir.iterdir() if (p / RELEASES_DIR).is_dir())


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
