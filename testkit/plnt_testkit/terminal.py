"""Start a child as a terminal's foreground job would: SIGINT at its default action.

A shell starts a background job (``pytest > log &``) with SIGINT ignored, and a child
inherits an ignored signal: a test that sends Ctrl-C to a child would then find it still
running, though the same test passes in a terminal. Passing ``preexec_fn=sigint_default``
to ``subprocess.Popen`` makes the test see what a user at a terminal sees, however the
suite itself was started.
"""

import signal


def sigint_default() -> None:
    """``preexec_fn``: SIGINT back to its default action in the child, before it execs."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
