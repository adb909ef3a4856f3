"""Fault tests run against the same real embedded stack as tests/e2e."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from stack_fixtures import client, registry, stack

__all__ = ["client", "registry", "stack"]
