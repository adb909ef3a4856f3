"""What a service wants the person running ``plnt up`` to read: the ``say`` field of the
JSON lines it appends to its log (long work in progress, such as a workflow's
requirements being installed), followed from where the log ended when the stack started.

It reads files only; ``plnt up``'s supervisor prints what it returns.
"""

import json
import os
from pathlib import Path

MAX_READ = 1024 * 1024
"""At most this much of a log is read per call: a flood of lines is caught up over calls."""


class SaidLines:
    """Follows one service log for lines with a ``say`` field."""

    def __init__(self, path: Path) -> None:
        self._path = path
        try:
            self._offset = path.stat().st_size  # what an earlier run wrote is not said again
        except OSError:
            self._offset = 0
        self._partial = b""

    def new(self) -> list[str]:
        """The ``say`` texts of the complete lines appended since the last call."""
        try:
            with self._path.open("rb") as stream:
                if stream.seek(0, os.SEEK_END) < self._offset:  # truncated or replaced
                    self._offset, self._partial = 0, b""
                stream.seek(self._offset)
                data = stream.read(MAX_READ)
        except OSError:
            return []
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        said = []
        for line in lines:
            if b'"say"' not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("say"), str):
                said.append(record["say"])
        return said
