"""``plnt up`` says what services put in a ``say`` field of their JSON log lines: only
lines appended since the stack started, each once, whole lines only."""

import json
from pathlib import Path

from plnt_cli.said import SaidLines


def line(**record: object) -> str:
    return json.dumps(record) + "\n"


def test_only_new_complete_lines_with_a_say_field_are_said_once(tmp_path: Path) -> None:
    log = tmp_path / "local-backend.log"
    log.write_text(line(event="old", say="from an earlier run"))
    said = SaidLines(log)
    with log.open("a") as stream:
        stream.write(line(event="code.requirements_installing", say="installing requirements"))
        stream.write(line(event="quiet"))
        stream.write('not json with "say" in it\n')
        stream.write('{"event": "half", "say": "wri')
    assert said.new() == ["installing requirements"]
    assert said.new() == []
    with log.open("a") as stream:
        stream.write('tten"}\n')
    assert said.new() == ["written"]


def test_a_log_that_does_not_exist_yet_or_was_replaced_is_followed_from_its_start(
    tmp_path: Path,
) -> None:
    log = tmp_path / "puller.log"
    said = SaidLines(log)
    assert said.new() == []
    log.write_text(line(say="first") + line(say="second"))
    assert said.new() == ["first", "second"]
    log.write_text(line(say="after a truncation"))
    assert said.new() == ["after a truncation"]
