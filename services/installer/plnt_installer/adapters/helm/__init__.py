"""The Helm backend: one Helm release of ``charts/plnt-runner`` per revision.

As Flux helm-controller splits its reconcilers, each Helm action has its own module
driving ``helm_cli``: ``install`` (remedy, then ``helm upgrade --install``), ``upgrade``
(the command and a promotion's values), ``rollback``, ``uninstall``, and ``unlock`` (a
release left pending or failed, remedied as ``remediation.remediate`` decides).
``finding`` locates releases on the kubernetes PlntBackends, ``ready`` reads their
Deployments, and ``backend.HelmReleaseBackend`` composes them into a ``ReleaseBackend``.
"""
