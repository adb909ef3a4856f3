"""Reads back an event a saga published earlier (shared with the installer)."""

from plnt_common.bus.saga_events import last_of_saga

__all__ = ["last_of_saga"]
