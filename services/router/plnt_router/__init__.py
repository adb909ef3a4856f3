"""plnt's router: the one HTTP entry point consumers call to invoke deployed workflows.

It forwards each call to the runner of the promoted revision, or by weight to a canary,
using a route table mirrored live from the ``plnt-routes`` KV bucket; it also speaks
OpenAI's chat-completions dialect and exports Prometheus metrics. It is not a workflow
runner and it never writes routes: the promoter does.

Layers: ``logic`` and ``table`` are pure; ``adapters`` hold the nats and aiohttp-client
I/O; ``handlers`` are the HTTP endpoints; ``app`` wires them (``create_app``, ``serve``,
``main``).
"""
