"""The runner's backpressure: the shared in-flight limiter with its waiters exported as
``plnt_queue_depth{component="runner"}``. No I/O here."""

from plnt_common.admission import InFlightLimiter
from plnt_common.metrics import QUEUE_DEPTH


class Admission(InFlightLimiter):
    """At most ``max_in_flight`` invocations run, at most ``max_queue`` wait (FIFO)."""

    def __init__(self, *, max_in_flight: int, max_queue: int, component: str = "runner") -> None:
        depth = QUEUE_DEPTH.labels(component=component)
        depth.set(0)
        super().__init__(
            max_in_flight=max_in_flight, max_queue=max_queue, on_queue_change=depth.set
        )
