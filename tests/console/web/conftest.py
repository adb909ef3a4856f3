"""The browser tests run against the embedded stack of tests/e2e (its shared helpers)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "e2e"))

from stack_fixtures import client, registry, stack

__all__ = ["client", "registry", "stack"]
