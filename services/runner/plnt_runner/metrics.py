"""The runner's own Prometheus metrics (the contract's shared ones are in ``plnt_common``).

Shadow calls also count in ``plnt_invocations_total`` (they are invocations the runner
served); these tell them apart, and count the side-effect calls they did not make.
"""

from prometheus_client import Counter

SHADOW_CALLS = Counter(
    "plnt_runner_shadow_calls_total",
    "Shadow invocations (x-plnt-shadow: 1) served, by status.",
    ["workflow", "revision", "status"],
)
DRY_RUNS = Counter(
    "plnt_runner_dry_runs_total",
    "Side-effect tool calls not executed because the invocation was a shadow call.",
    ["workflow", "tool"],
)
