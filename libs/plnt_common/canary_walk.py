"""A stepped canary walked over several backends, one canary at a time.

A run spread over several backends (``spec.placement.spread``) that replaces a stable
revision walks ``spec.canary.steps`` on its first backend's copy, then again on the next
backend's, each copy judged on the calls it alone takes (only the walked copy takes the
canary's share). Each copy is installed and smoke-tested when the walk reaches its
backend (``CanaryRef.walk``; the installer's ``_install_next``). Steps are numbered
across the walk, so every step of a saga has its own number: with steps ``[10, 50]``
over ``east, west``, step 3 is 10 % on west. An empty walk is the plain stepped canary:
every copy takes the share at once.
"""

from collections.abc import Sequence


def total_steps(steps: Sequence[int], walk: Sequence[str]) -> int:
    return len(steps) * max(1, len(walk))


def step_weight(steps: Sequence[int], step: int) -> int:
    """The canary's weight at ``step`` (1-based, counted across the walk)."""
    return steps[(step - 1) % len(steps)]


def step_backend(steps: Sequence[int], walk: Sequence[str], step: int) -> str:
    """The backend whose copy takes the canary's share at ``step``; "" without a walk."""
    return walk[(step - 1) // len(steps)] if walk else ""


def step_label(steps: Sequence[int], walk: Sequence[str], step: int) -> str:
    """``2/4 on east``, or ``2/2`` without a walk."""
    label = f"{step}/{total_steps(steps, walk)}"
    return f"{label} on {step_backend(steps, walk, step)}" if walk else label
