"""``plnt runner check``: real runner processes (plnt's own, the standard-library example and
variants of it that break one clause) checked against the runner contract."""

import asyncio
import re
import shlex
import sys
from pathlib import Path

import pytest
from cli_support import Outcome, plnt

from plnt_common.nats_server import free_port
from plnt_testkit.stdlib_runner import RUNNER, WORKFLOW, broken_runner, running

PYTHON = shlex.quote(sys.executable)
REPO = Path(__file__).resolve().parents[2]
REVIEW_RESPONDER = REPO / "examples" / "registry" / "review-responder" / "1.2.0" / "workflow.yaml"
ALL_HOLD = "runner contract v1: 8 of 8 clauses hold"


def clause_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line[:1] in "✓✗?"]


def test_the_standard_library_runner_keeps_all_eight_clauses(
    capfd: pytest.CaptureFixture[str],
) -> None:
    result = plnt(
        capfd, "runner", "check", "--run", f"{PYTHON} {RUNNER}", "--workflow", str(WORKFLOW)
    )
    assert result.code == 0, result
    lines = clause_lines(result.out)
    assert [line.split()[:3] for line in lines] == [
        ["✓", "1", "settings:"],
        ["✓", "2", "healthz:"],
        ["✓", "3", "invoke:"],
        ["✓", "4", "errors:"],
        ["✓", "5", "stream:"],
        ["✓", "6", "metrics:"],
        ["✓", "7", "sigterm:"],
        ["✓", "8", "trace:"],
    ]
    assert re.fullmatch(r"✓ 2 healthz: 200 after \d+\.\d s", lines[1])
    assert "x-plnt-revision runner-check" in lines[2]
    assert lines[6].startswith("✓ 7 sigterm: finished the call in flight (HTTP 200) and exited 0")
    assert result.out.rstrip().endswith(ALL_HOLD)


def test_plnt_runner_keeps_all_eight_clauses(capfd: pytest.CaptureFixture[str]) -> None:
    result = plnt(
        capfd,
        "runner",
        "check",
        "--run",
        f"{PYTHON} -m plnt_runner",
        "--workflow",
        str(REVIEW_RESPONDER),
    )
    assert result.code == 0, result
    assert len(clause_lines(result.out)) == 8
    assert result.out.rstrip().endswith(ALL_HOLD)


@pytest.mark.parametrize(
    ("broken", "line"),
    [
        ("no-tokens-header", "✗ 3 invoke: response lacks the x-plnt-tokens header"),
        (
            "no-result-event",
            "✗ 5 stream: stream has no result or error event (events: step, done)",
        ),
        ("new-trace", "✗ 8 trace: traceparent names trace "),
    ],
    ids=["missing-x-plnt-tokens", "no-result-sse-event", "answers-in-a-new-trace"],
)
def test_a_runner_breaking_one_clause_is_caught_naming_it(
    capfd: pytest.CaptureFixture[str], tmp_path: Path, broken: str, line: str
) -> None:
    script = broken_runner(tmp_path, broken)
    result = plnt(
        capfd, "runner", "check", "--run", f"{PYTHON} {script}", "--workflow", str(WORKFLOW)
    )
    assert result.code == 1, result
    missed = [entry for entry in clause_lines(result.out) if entry.startswith("✗")]
    assert len(missed) == 1 and missed[0].startswith(line), missed
    assert result.out.rstrip().endswith("runner contract v1: 7 of 8 clauses hold")


def test_a_workflow_that_fails_leaves_clause_3_not_judged_and_the_check_fails(
    capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    workflow = tmp_path / "workflow.yaml"
    workflow.write_text(
        "apiVersion: microagents.dev/v1\nkind: Workflow\n"
        "metadata: {name: calls-home, version: 1.0.0}\n"
        "spec:\n  runtime: {image: 'ghcr.io/acme/calls-home:1'}\n  steps:\n"
        "  - {id: call_home, tool: http.request, with: {url: 'http://127.0.0.1:9/closed'}}\n"
    )
    result = plnt(
        capfd, "runner", "check", "--run", f"{PYTHON} -m plnt_runner", "--workflow", str(workflow)
    )
    assert result.code == 1, result
    lines = clause_lines(result.out)
    assert [line[0] for line in lines] == ["✓", "✓", "?", "✓", "✓", "✓", "✓", "✓"], result.out
    assert lines[2].startswith("? 3 invoke: not judged: the invocation failed (HTTP 500: step")
    assert lines[4] == "✓ 5 stream: 0 step, 0 token events, then one error event"
    assert "(HTTP 500)" in lines[6]


async def test_a_running_runner_is_checked_on_clauses_2_to_6_and_8(
    capfd: pytest.CaptureFixture[str],
) -> None:
    async with running(revision="r7") as url:
        result = await _in_thread(capfd, "runner", "check", url, "--revision", "r7")
    assert result.code == 0, result
    assert [line.split()[1] for line in clause_lines(result.out)] == ["2", "3", "4", "5", "6", "8"]
    assert result.out.rstrip().endswith("runner contract v1: 6 of 6 clauses hold")


async def test_a_running_runner_echoing_another_revision_misses_clause_3(
    capfd: pytest.CaptureFixture[str],
) -> None:
    async with running(revision="r7") as url:
        result = await _in_thread(capfd, "runner", "check", url, "--revision", "r8")
    assert result.code == 1, result
    assert "✗ 3 invoke: x-plnt-revision is 'r7', not PLNT_RUNNER_REVISION 'r8'" in result.out


def test_an_unreachable_url_is_one_line(capfd: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    line = plnt(capfd, "runner", "check", url).error_line
    assert line.startswith(f"plnt: cannot reach the runner at {url}: ")


def test_a_command_that_exits_at_once_is_one_line_with_its_last_stderr_lines(
    capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = tmp_path / "crash.py"
    script.write_text("import sys\nprint('loading', file=sys.stderr)\nsys.exit('no GPU here')\n")
    result = plnt(
        capfd, "runner", "check", "--run", f"{PYTHON} {script}", "--workflow", str(WORKFLOW)
    )
    assert result.error_line == (
        "plnt: the runner exited with code 1 before /healthz answered 200; "
        "its last stderr lines: loading | no GPU here"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "plnt: runner check takes a URL or --run COMMAND (one of them)"),
        (("--run", "python runner.py"), "plnt: runner check --run needs --workflow FILE"),
        (("http://x", "--run", "python r.py"), "plnt: runner check takes a URL or --run"),
        (("--run", "nope-no-such-command", "--workflow", str(WORKFLOW)), "plnt: --run: cannot"),
        (("http://x", "--data", "[1]"), "plnt: --data must be a JSON object"),
        (("localhost:8181",), "plnt: runner check localhost:8181: give an http://"),
    ],
    ids=["neither", "no-workflow", "both", "no-such-command", "data-not-object", "not-a-url"],
)
def test_wrong_arguments_are_one_line(
    capfd: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    assert plnt(capfd, "runner", "check", *argv).error_line.startswith(message)


async def _in_thread(capfd: pytest.CaptureFixture[str], *argv: str) -> Outcome:
    """``plnt`` in a thread: it runs an event loop of its own, beside this test's."""
    return await asyncio.to_thread(plnt, capfd, *argv)
