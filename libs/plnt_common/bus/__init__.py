"""The bus: connecting to NATS, provisioning JetStream, publishing events and consuming them.

Only this package (and adapters) import ``nats``. It knows delivery rules, not saga rules.
"""

from plnt_common.bus.connection import connect

__all__ = ["connect"]
