"""The watcher: resources in, sagas out, status back.

It watches WorkflowRuns (the embedded ``plnt-resources`` store here; the Kubernetes API
through the same port), starts a saga per new generation and a deletion saga per delete,
folds every event into the ``plnt-runs`` projection, writes status back, releases the
finalizer after ``run.removed``, and publishes ``step.timed_out`` past a deadline. It
pulls, installs, routes and judges nothing.
"""
