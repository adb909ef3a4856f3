"""Prometheus metrics of the contract, defined once; each process exports what it touches."""

from prometheus_client import Counter, Gauge, Histogram

# Finer between 0.5 s and 5 s, where LLM workflows answer and p95 budgets (2500-3000 ms)
# sit: a quantile interpolated inside a 2.5-5 s bucket could be off by a second.
LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75,
    1, 1.5, 2, 2.5, 3, 4, 5, 10, 30,
)  # fmt: skip

INVOCATION_DURATION = Histogram(
    "plnt_invocation_duration_seconds",
    "Time to serve one workflow invocation.",
    ["workflow", "revision", "status"],
    buckets=LATENCY_BUCKETS,
)
INVOCATIONS = Counter(
    "plnt_invocations_total",
    "Workflow invocations served.",
    ["workflow", "revision", "status"],
)
STEP_DURATION = Histogram(
    "plnt_step_duration_seconds",
    "Time one workflow step took.",
    ["workflow", "step", "tool", "status"],
    buckets=LATENCY_BUCKETS,
)
STEP_CACHE_REQUESTS = Counter(
    "plnt_step_cache_requests_total",
    "Step cache look-ups by result (hit or miss).",
    ["result"],
)
QUEUE_DEPTH = Gauge(
    "plnt_queue_depth",
    "Requests waiting for an in-flight slot.",
    ["component"],
)
GPU_UTILIZATION = Gauge(
    "plnt_gpu_utilization_ratio",
    "GPU utilization from NVML, 0..1; absent when no GPU exists.",
    ["gpu"],
)
SAGA_STEP_DURATION = Histogram(
    "plnt_saga_step_duration_seconds",
    "Handler time of one saga step.",
    ["service", "event", "outcome"],
    buckets=LATENCY_BUCKETS,
)
DEPLOY_DURATION = Histogram(
    "plnt_deploy_duration_seconds",
    "From run.requested to the saga's terminal event.",
    ["outcome"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)

# Additions to the contract's metrics: what a saga step did, so "exactly once" can be
# counted on the side effects themselves rather than on the (deduplicated) events.
SAGA_STEP_RUNS = Counter(
    "plnt_saga_step_runs_total",
    "Saga handler bodies that ran to completion (redeliveries count again).",
    ["service", "step"],
)
DEAD_LETTERS = Counter(
    "plnt_dead_letters_total",
    "Saga events a service gave up on: deliveries that spent their attempts, terminated "
    "once the step's failure event was published (plnt history lists them).",
    ["service", "event"],
)
SIDE_EFFECTS = Counter(
    "plnt_side_effects_total",
    "Side effects a saga step carried out (saga_request, spec_store, canary_install, "
    "canary_removal, runner_start, smoke_run, route_write, terminal_claim; route_follow: "
    "the route follower's writes, apart from the saga's route_write).",
    ["service", "effect"],
)

# Additions to the contract's metrics: what calls spent at the LLM, for live analysis.
# The runner counts them per call; the router adds what the runner's answer headers say.
LLM_TOKENS = Counter(
    "plnt_llm_tokens_total",
    "LLM tokens spent by workflow invocations, by kind (prompt or completion).",
    ["workflow", "revision", "kind"],
)
LLM_COST = Counter(
    "plnt_llm_cost_usd_total",
    "LLM cost of workflow invocations in US dollars, at the backend's llm prices.",
    ["workflow", "revision"],
)
