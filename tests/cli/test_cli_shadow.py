"""``plnt shadow NAME`` against a real nats-server: the figures and the worst pairs side by
side from status.shadow, a clear line when the run never shadowed, one error line for an
unknown run."""

import asyncio
from typing import Any

import pytest
import yaml
from cli_support import plnt, run_manifest

from plnt_common.bus.bus import Bus
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import ShadowExample, ShadowStatus, parse_resource

LONG_ANSWER = '{"output":{"queue":"billing","why":"' + "x" * 300 + '"}}'
FAILED = ShadowStatus(
    pairs=200,
    calls=200,
    noise_pairs=50,
    similarity=0.71,
    noise_similarity=0.93,
    cost_ratio=1.02,
    p95_ratio=None,
    error_percent_delta=0.5,
    tool_call_diff_percent=1.0,
    spent_usd=0.4,
    passed=False,
    reason="median similarity 0.71 < 0.85; stable vs stable 0.93",
    examples=(
        ShadowExample(
            input='{"text":"my invoice is wrong"}',
            stable=LONG_ANSWER,
            canary='{"output":{"queue":"sales"}}',
            score=0.12,
        ),
    ),
)


async def store_run(url: str, name: str, spec: dict[str, Any], status: dict[str, Any]) -> None:
    bus = await Bus.open(url, service="test")
    try:
        store = ResourceStore(bus)
        await store.apply(parse_resource(run_manifest(name, **spec)))
        await store.update_status("WorkflowRun", "default", name, status)
    finally:
        await bus.close()


def stored(
    bus_url: str, name: str, *, phase: str, shadow: ShadowStatus | None, percent: int
) -> None:
    status: dict[str, Any] = {"phase": phase, "message": "rolled back 2.0.0-g2: aborted"}
    if shadow is not None:
        status["shadow"] = shadow.model_dump(mode="json", by_alias=True)
    spec = {"canary": {"shadow": {"percent": percent, "calls": 200}}}
    asyncio.run(store_run(bus_url, name, spec, status))


def test_a_failed_shadow_shows_its_figures_and_the_worst_pair_side_by_side(
    bus_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    stored(bus_url, "judged", phase="RolledBack", shadow=FAILED, percent=20)
    shown = plnt(capfd, "--nats", bus_url, "shadow", "judged")
    assert shown.code == 0, shown
    lines = shown.out.splitlines()
    assert lines[0] == (
        "workflowrun/judged: shadow failed: median similarity 0.71 < 0.85; stable vs stable 0.93"
    )
    assert lines[1].split()[:4] == ["PAIRS", "NOISE", "PAIRS", "SIMILARITY"]
    assert lines[2].split() == [
        "200/200",
        "50",
        "0.71",
        "0.93",
        "1.02",
        "-",
        "0.5",
        "1.0%",
        "$0.4000",
    ]
    header, row = lines[5], lines[6]
    assert header.split() == ["SCORE", "INPUT", "STABLE", "ANSWER", "CANARY", "ANSWER"]
    # the columns line up: each cell starts under its heading
    for heading, cell in [
        ("INPUT", '{"text":"my invoice is wrong"}'),
        ("STABLE ANSWER", '{"output":{"queue":"billing","why":"xxxxxxxxxxx…'),
        ("CANARY ANSWER", '{"output":{"queue":"sales"}}'),
    ]:
        assert row[header.index(heading) :].startswith(cell), (heading, row)
    assert row.startswith("0.12")


def test_json_output_is_status_shadow_whole(
    bus_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    stored(bus_url, "whole", phase="RolledBack", shadow=FAILED, percent=20)
    shown = plnt(capfd, "--nats", bus_url, "shadow", "whole", "-o", "yaml")
    assert yaml.safe_load(shown.out)["examples"][0]["stable"] == LONG_ANSWER


@pytest.mark.parametrize(
    ("phase", "shadow", "percent", "line"),
    [
        (
            "Ready",
            None,
            0,
            "workflowrun/{} never shadowed: spec.canary.shadow.percent is 0 or unset",
        ),
        ("Smoking", None, 20, "workflowrun/{} has not shadowed yet (phase Smoking)"),
        (
            "Shadowing",
            ShadowStatus(pairs=57, calls=200, reason="judging: 57 of 200 pairs"),
            20,
            "workflowrun/{}: shadowing, judging: 57 of 200 pairs",
        ),
        (
            "RolledBack",
            ShadowStatus(pairs=3, calls=200, reason="judging: 3 of 200 pairs"),
            20,
            "workflowrun/{}: shadow ended without a verdict (phase RolledBack): "
            "rolled back 2.0.0-g2: aborted",
        ),
    ],
    ids=["never", "not-yet", "in-progress", "aborted"],
)
def test_the_first_line_says_where_the_shadow_stands(
    bus_url: str,
    capfd: pytest.CaptureFixture[str],
    phase: str,
    shadow: ShadowStatus | None,
    percent: int,
    line: str,
) -> None:
    name = f"stands-{phase.lower()}"
    stored(bus_url, name, phase=phase, shadow=shadow, percent=percent)
    shown = plnt(capfd, "--nats", bus_url, "shadow", name)
    assert (shown.code, shown.out.splitlines()[0]) == (0, line.format(name))


def test_an_unknown_run_is_one_error_line(bus_url: str, capfd: pytest.CaptureFixture[str]) -> None:
    shown = plnt(capfd, "--nats", bus_url, "shadow", "nobody")
    assert "'nobody' not found" in shown.error_line
