"""The router's I/O: the ``plnt-routes`` KV watch (nats) and the pooled client to runners (aiohttp).

Adapters do what they are told: they never choose a revision, admit or refuse a call, or
shape an HTTP answer. Errors leave them as ``plnt_router.errors`` types.
"""
