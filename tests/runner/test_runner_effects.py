"""The ``x-plnt-effects`` list: its entries, their order and its cap."""

import hashlib
import json

from plnt_runner.effects import MAX_EFFECTS, MAX_EFFECTS_BYTES, EffectLog, input_sha256


def test_an_entry_names_the_tool_and_the_sha256_of_its_input_as_canonical_json() -> None:
    log = EffectLog()
    log.record(tool="crm.notify", tool_input={"with": {"b": 2, "a": "é"}, "input": {}})
    expected = hashlib.sha256(b'{"input":{},"with":{"a":"\\u00e9","b":2}}').hexdigest()
    assert json.loads(log.header_value()) == [{"tool": "crm.notify", "input_sha256": expected}]
    assert log.header_value() == f'[{{"tool":"crm.notify","input_sha256":"{expected}"}}]'


def test_entries_keep_call_order_and_the_same_input_hashes_the_same() -> None:
    log = EffectLog()
    for tool, value in (("b.second", 1), ("a.first", 2), ("b.second", 1)):
        log.record(tool=tool, tool_input={"n": value})
    assert [entry["tool"] for entry in log.as_list()] == ["b.second", "a.first", "b.second"]
    assert log.as_list()[0] == log.as_list()[2]
    assert log.as_list()[0]["input_sha256"] == input_sha256({"n": 1})


def test_calls_beyond_the_cap_are_counted_not_listed() -> None:
    log = EffectLog()
    for n in range(MAX_EFFECTS + 6):
        log.record(tool="t", tool_input=n)
    assert len(json.loads(log.header_value())) == MAX_EFFECTS
    assert log.dropped == 6
    assert json.loads(log.header_value())[-1]["input_sha256"] == input_sha256(MAX_EFFECTS - 1)


def test_long_tool_names_stop_the_list_before_an_http_header_line_overflows() -> None:
    log = EffectLog()
    for n in range(MAX_EFFECTS):
        log.record(tool="acme." + "x" * 120, tool_input=n)
    assert len(log.header_value().encode()) <= MAX_EFFECTS_BYTES
    assert log.dropped > 0
    assert len(log.calls) + log.dropped == MAX_EFFECTS
