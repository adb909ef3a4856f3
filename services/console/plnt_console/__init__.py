"""plnt's web console: a read-mostly view of the stack for people who run rollouts.

It shows every WorkflowRun live (from the ``plnt-runs`` watch, pushed over server-sent
events), a run's saga timeline (from the event stream, as ``plnt history`` reads it), the
routers' live per-revision figures, a playground that invokes a workflow through the
router, and promote/abort/rollback buttons that take the CLI's path. It decides nothing
about a rollout: the saga does. Static files are served by the console itself (no CDN).
"""
