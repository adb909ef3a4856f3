"""The smoke service: invokes a fresh canary N times and judges it against its budgets.

It publishes a verdict with p50, p95 and error figures; it routes and installs nothing.
"""
