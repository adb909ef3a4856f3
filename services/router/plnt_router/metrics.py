"""The router's side of the contract metrics: invocation latency, counts and queue depth.

The metric objects themselves are defined once in ``plnt_common.metrics``; this module
only caches their labelled children so the hot path skips prometheus-client's locked
label lookup. It does not expose ``/metrics`` (``handlers`` does).
"""

from prometheus_client import Counter, Gauge, Histogram

from plnt_common.metrics import INVOCATION_DURATION, INVOCATIONS, LLM_COST, LLM_TOKENS, QUEUE_DEPTH

COMPONENT = "router"


class InvocationMetrics:
    """Records one served call as ``plnt_invocation_duration_seconds`` + ``plnt_invocations_total``.

    Labels: ``workflow`` (``<namespace>/<name>``, empty for calls to unknown workflows so
    arbitrary names cannot blow up the series count), ``revision`` (empty when no runner
    was chosen) and ``status`` (the HTTP status code).
    """

    def __init__(self) -> None:
        self._series: dict[tuple[str, str, int], tuple[Histogram, Counter]] = {}
        self._spend: dict[tuple[str, str], tuple[Counter, Counter, Counter]] = {}

    def observe(
        self,
        *,
        workflow: str,
        revision: str,
        status: int,
        seconds: float,
        exemplar: dict[str, str] | None = None,
    ) -> None:
        """``exemplar``: the call's trace id, shown with the latency in OpenMetrics."""
        key = (workflow, revision, status)
        series = self._series.get(key)
        if series is None:
            labels = {"workflow": workflow, "revision": revision, "status": str(status)}
            series = (INVOCATION_DURATION.labels(**labels), INVOCATIONS.labels(**labels))
            self._series[key] = series
        series[0].observe(seconds, exemplar)
        series[1].inc()

    def recorded_calls(self) -> list[tuple[str, str, int, Histogram, Counter]]:
        """(workflow, revision, status, latency histogram, counter) of every series so far."""
        return [(*key, *series) for key, series in self._series.items()]

    def recorded_spend(self) -> list[tuple[str, str, Counter, Counter, Counter]]:
        """(workflow, revision, prompt tokens, completion tokens, cost) counters so far."""
        return [(*key, *counters) for key, counters in self._spend.items()]

    def spend(self, *, workflow: str, revision: str, tokens: str, cost: str | None) -> None:
        """Add what a runner's answer says the call spent to ``plnt_llm_tokens_total`` and
        ``plnt_llm_cost_usd_total``: ``tokens`` is its ``<prompt>,<completion>`` header.

        A malformed header is ignored: the answer itself is still good.
        """
        prompt, _, completion = tokens.partition(",")
        try:
            prompt_tokens, completion_tokens = int(prompt), int(completion)
            cost_usd = float(cost) if cost else 0.0
        except ValueError:
            return
        if min(prompt_tokens, completion_tokens, cost_usd) < 0:
            return
        key = (workflow, revision)
        counters = self._spend.get(key)
        if counters is None:
            counters = (
                LLM_TOKENS.labels(workflow, revision, "prompt"),
                LLM_TOKENS.labels(workflow, revision, "completion"),
                LLM_COST.labels(workflow, revision),
            )
            self._spend[key] = counters
        counters[0].inc(prompt_tokens)
        counters[1].inc(completion_tokens)
        counters[2].inc(cost_usd)


_QUEUE_DEPTH = QUEUE_DEPTH.labels(component=COMPONENT)


def set_queue_depth(depth: int) -> None:
    """Publish the limiter's queue length as ``plnt_queue_depth{component="router"}``."""
    _QUEUE_DEPTH.set(depth)


SHADOW_CALLS = Counter(
    "plnt_router_shadow_calls_total",
    "Mirrored (shadow) calls by workflow, kind (canary, noise) and outcome: published (the "
    "pair is on the bus), publish_failed, queue_full (not sent), over_budget (not sent).",
    ["workflow", "kind", "outcome"],
)
SHADOW_DROPPED = Counter(
    "plnt_router_shadow_dropped_total",
    "Mirrored calls or pairs dropped: queue_full (the shadow queue was full, the call was "
    "not mirrored) or publish_failed (the bus did not take the pair).",
    ["reason"],
)
SHADOW_BUDGET_SPENT = Counter(
    "plnt_router_shadow_budget_spent_total",
    "Sagas whose shadow budget this router used up (once each): mirroring stopped for them.",
    ["workflow"],
)

BACKEND_UP = Gauge(
    "plnt_router_backend_up",
    "1 while a backend endpoint of a spread revision takes calls, 0 while the router took it "
    "out (it stopped answering) or its backend reports the runner down.",
    ["workflow", "revision", "backend"],
)
