"""I/O of the smoke service: HTTP calls to the canary."""
