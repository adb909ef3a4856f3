"""JSON bodies with a nesting limit, and the SSE decoder the chat relay reads runners with."""

import json

import pytest

from plnt_router.json_body import JsonRejected, load_limited, load_object, nesting_depth
from plnt_router.sse import SseDecoder


def nested(depth: int) -> bytes:
    return b'{"a": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"[" * 200_000, "deeper than 64"),  # json.loads alone raises RecursionError
        (nested(65), "deeper than 64"),
        (b"{", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "not an array"),
        (b"null", "not null"),
    ],
    ids=["200k-brackets", "one-level-too-deep", "truncated", "not-utf8", "array", "null"],
)
def test_load_object_refuses_with_one_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(JsonRejected, match=reason):
        load_object(raw, max_depth=64)


def test_load_object_accepts_exactly_the_limit_and_brackets_inside_strings() -> None:
    assert nesting_depth(json.loads(nested(64)), limit=64) == 64
    assert load_object(nested(64), max_depth=64)["a"]
    # Many brackets, but in a string: the walk finds depth 1.
    assert load_object(json.dumps({"t": "[" * 500}).encode(), max_depth=2) == {"t": "[" * 500}


def test_load_limited_reads_text_too() -> None:
    assert load_limited('{"x": [1]}', max_depth=2) == {"x": [1]}
    with pytest.raises(JsonRejected):
        load_limited("[[[1]]]", max_depth=2)


def test_nesting_depth_counts_scalars_as_zero_and_stops_past_the_limit() -> None:
    assert nesting_depth(3, limit=5) == 0
    assert nesting_depth({"a": [{"b": []}], "c": 1}, limit=10) == 4
    assert nesting_depth(json.loads(b"[" * 900 + b"]" * 900), limit=10) == 11


def test_sse_decoder_yields_events_however_the_bytes_are_split() -> None:
    stream = (
        b'event: token\ndata: {"delta": "he"}\n\n'
        b": keep-alive comment\n\n"
        b'event: token\r\ndata: {"delta": "y"}\r\n\r\n'
        b'data: {"plain": true}\n\n'
        b"event: result\ndata: {}\n\n"
    )
    expected = [
        ("token", '{"delta": "he"}'),
        ("token", '{"delta": "y"}'),
        ("message", '{"plain": true}'),
        ("result", "{}"),
    ]
    whole = SseDecoder().feed(stream)
    assert whole == expected
    decoder = SseDecoder()
    byte_by_byte = [event for i in range(len(stream)) for event in decoder.feed(stream[i : i + 1])]
    assert byte_by_byte == expected
