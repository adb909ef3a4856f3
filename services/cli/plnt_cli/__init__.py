"""The ``plnt`` command line: the embedded stack (``up``, ``demo``), resources, history.

It talks to the system only through the bus and the router's HTTP API; it holds no saga
logic of its own.
"""
