"""plnt's router: the one HTTP entry point consumers call to invoke deployed workflows.

It forwards each call to the runner of the promoted revision, or by weight to a canary,
using a route table mirrored live from the ``plnt-routes`` KV bucket; it also speaks
OpenAI's chat-completions dialect and exports Prometheus metrics. It is not a workflow
runner and it never writes routes: the promoter does.

Layers: ``logic``, ``table``, ``json_body``, ``sse``, ``openai_compat`` and
``chat_stream`` are pure; ``adapters`` hold the nats and aiohttp-client I/O; ``handlers``
and ``chat`` are the HTTP endpoints over ``pipeline``; ``server`` is aiohttp's
connection protocol with the router's deadlines and JSON protocol errors; ``app`` wires
them (``create_app``, ``app_runner``, ``serve``, ``main``).
"""
