"""``plnt invoke --trace``: the trace id from the router's ``traceparent``, or why none."""

import pytest

from plnt_cli.commands import Invoked
from plnt_cli.main import build_parser, trace_line


def answered(traceparent: str) -> Invoked:
    return Invoked(status=200, revision="r1", text="{}", traceparent=traceparent)


def test_the_trace_id_is_read_from_the_routers_traceparent() -> None:
    answer = answered("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    assert trace_line(answer) == "trace 4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.mark.parametrize(
    "traceparent",
    ["", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-xyz-1-01"],
    ids=["absent", "garbage", "zero-trace", "short"],
)
def test_without_a_valid_traceparent_the_line_says_how_to_turn_tracing_on(
    traceparent: str,
) -> None:
    line = trace_line(answered(traceparent))
    assert line.startswith("trace: none")
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in line


def test_invoke_takes_trace() -> None:
    assert build_parser().parse_args(["invoke", "flow", "--trace"]).trace is True
    assert build_parser().parse_args(["invoke", "flow"]).trace is False
