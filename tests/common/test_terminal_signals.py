"""Tests that send Ctrl-C to a child pass however the suite was started."""

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from plnt_testkit.terminal import sigint_default

SAYS_ITS_SIGINT = "import signal; print(signal.getsignal(signal.SIGINT))"


@pytest.fixture
def sigint_ignored() -> Iterator[None]:
    """The suite as a background job (``pytest &``): SIGINT ignored, children inheriting."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("sigint_ignored")
def test_a_child_started_as_a_terminal_would_gets_ctrl_c_even_from_a_background_suite() -> None:
    plain = subprocess.run([sys.executable, "-c", SAYS_ITS_SIGINT], capture_output=True, text=True)
    reset = subprocess.run(
        [sys.executable, "-c", SAYS_ITS_SIGINT],
        capture_output=True,
        text=True,
        preexec_fn=sigint_default,
    )

    assert plain.stdout.strip() == str(int(signal.SIG_IGN))  # what the child would inherit
    assert reset.stdout.strip() == "<built-in function default_int_handler>", reset.stderr
