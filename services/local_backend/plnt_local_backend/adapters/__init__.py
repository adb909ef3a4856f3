"""I/O of the local-backend: NATS (desired watch, observed records, specs), files, processes, HTTP.

Adapters do what they are told; whether to start, adopt, restart or stop is decided in
``plnt_local_backend.logic``.
"""
