"""A real embedded stack per module: see stack_fixtures."""

from stack_fixtures import client, registry, stack

__all__ = ["client", "registry", "stack"]
