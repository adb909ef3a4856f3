"""plnt's puller: the saga step between ``run.requested`` and ``spec.pulled``.

For each requested run it fetches ``<registry>/<name>/<version>/workflow.yaml`` (``file://``
or ``s3://``), checks the pinned ``integrityHash``, validates the Workflow, resolves the
``PlntBackend`` the run names, stores the spec bytes by digest in ``plnt-specs`` and
publishes ``spec.pulled``; a spec or backend that can never work ends the saga with
``run.failed`` at once, a registry that does not answer is retried with back-off.

It is not an installer and never touches a backend: it only checks that the named one
exists and offers the GPU class asked for.

Layers: ``logic`` is pure; ``ports`` declares what it needs from the world; ``adapters``
hold every I/O library (boto3, the file system, nats through ``plnt_common``);
``handlers`` run one event through observe -> decide -> act -> publish; ``app`` wires them.
"""
