"""Calling ``plnt`` in-process and reading what the user would see."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from plnt_cli.main import main


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str

    @property
    def error_line(self) -> str:
        """The one line an error must be: asserts the shape every user error shares."""
        assert self.code != 0, self
        assert "Traceback" not in self.out + self.err, self
        lines = [line for line in self.err.splitlines() if line.strip()]
        assert len(lines) == 1, self
        assert lines[0].startswith("plnt: "), self
        assert "unexpected" not in lines[0], self
        return lines[0]


def plnt(capfd: pytest.CaptureFixture[str], *argv: str) -> Outcome:
    """``plnt ARGV...`` as main() runs it; the exit code from its SystemExit."""
    capfd.readouterr()  # drop what came before
    try:
        main(list(argv))
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    captured = capfd.readouterr()
    return Outcome(code=code, out=captured.out, err=captured.err)


def run_manifest(name: str, **spec: Any) -> dict[str, Any]:
    """A valid WorkflowRun (S3 registry: nothing pulls it here); ``spec`` adds to its spec."""
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "WorkflowRun",
        "metadata": {"name": name},
        "spec": {
            "workflow": {"ref": f"{name}@1.0.0", "registry": "s3://bucket"},
            "backend": {"cluster": "gpu-cluster-01"},
            **spec,
        },
    }


def write_yaml(path: Path, *documents: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump_all(documents))
    return path
