"""The local-backend: the embedded mode's process supervisor, a kubelet for runner processes.

It reconciles the desired releases in ``plnt-releases`` (written by the installer) into
runner processes on this machine, and reports each one's observed state back. Runners
run in their own sessions and survive restarts of the local-backend, which adopts them
when it starts again. It does not decide what to install (the installer does), route
traffic (the promoter and router) or judge a runner (smoke).

``stop_all_runners(data_dir)`` is for ``plnt up``: it stops every runner left in
``data_dir`` once the local-backend has exited.
"""

from plnt_local_backend.adapters.processes import stop_all_runners

__all__ = ["stop_all_runners"]
