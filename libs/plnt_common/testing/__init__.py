"""Test support shipped with plnt: a real nats-server launcher and fakes of external systems.

Used by the test suite and by ``plnt up``; nothing here is imported by service code paths.
"""
