"""``plnt wait`` reports only what happened, large objects included (a real nats-server)."""

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import plnt, run_manifest

from plnt_common.bus.bus import Bus
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import parse_resource

# nats-py's watch marks its initial values as done when the server has nothing pending
# and the client has received nothing yet, also while a value this large is in flight.
LARGE_PAYLOAD = {"review": "x" * 600_000}


def large_run(name: str) -> dict[str, Any]:
    return run_manifest(name, smokeTest={"payload": LARGE_PAYLOAD})


async def store_run(url: str, document: dict[str, Any]) -> None:
    bus = await Bus.open(url, service="test")
    try:
        await ResourceStore(bus).apply(parse_resource(document))
    finally:
        await bus.close()


@pytest.fixture(scope="module")
def large_pending_run(bus_url: str) -> str:
    """A 600 KB WorkflowRun that stays: no watcher runs to move or delete it."""
    asyncio.run(store_run(bus_url, large_run("large")))
    return "large"


async def first_answers_absent(url: str, *, watches: int) -> int:
    """How many of ``watches`` fresh connections' watches first said the run is absent."""
    absent = 0
    for _ in range(watches):
        bus = await Bus.open(url, service="test")
        updates = ResourceStore(bus).watch_object("WorkflowRun", "default", "large")
        absent += await anext(updates) is None
        await updates.aclose()
        await bus.close()
    return absent


def test_a_watch_first_reports_a_large_object_as_present_every_time(
    bus_url: str, large_pending_run: str
) -> None:
    # With the watch's own initial marker, about 1 in 25 said absent: 300 tries all but
    # never miss that.
    assert asyncio.run(first_answers_absent(bus_url, watches=300)) == 0


def test_wait_for_delete_on_a_large_run_that_stays_times_out(
    capfd: pytest.CaptureFixture[str], bus_url: str, large_pending_run: str
) -> None:
    for _ in range(10):
        outcome = plnt(
            capfd, "--nats", bus_url, "wait", "wr", "large", "--for", "delete", "--timeout", "0.3"
        )
        assert outcome.error_line == "plnt: large still exists after 0.3s"
        assert "deleted" not in outcome.out


def test_wait_for_ready_on_a_large_pending_run_times_out_rather_than_not_found(
    capfd: pytest.CaptureFixture[str], bus_url: str, large_pending_run: str
) -> None:
    for _ in range(10):
        outcome = plnt(
            capfd,
            "--nats",
            bus_url,
            "wait",
            "wr",
            "large",
            "--for",
            "phase=Ready",
            "--timeout",
            "0.3",
        )
        assert outcome.error_line == (
            "plnt: timed out after 0.3s waiting for large to be Ready (last phase: Pending)"
        )


def test_wait_on_a_run_that_is_not_there_says_not_found(
    capfd: pytest.CaptureFixture[str], bus_url: str
) -> None:
    for condition in ("phase=Ready", "delete"):
        outcome = plnt(capfd, "--nats", bus_url, "wait", "wr", "absent", "--for", condition)
        if condition == "delete":
            # the condition holds (nothing is there), and it is said as it is
            assert (
                outcome.code == 0
                and outcome.out.strip() == "workflowrun.plnt.work/absent not found"
            )
        else:
            assert outcome.error_line == (
                "plnt: workflowruns 'absent' not found in namespace 'default'"
            )


def delete_later(url: str, name: str, *, after_s: float) -> threading.Thread:
    async def delete() -> None:
        await asyncio.sleep(after_s)
        bus = await Bus.open(url, service="test")
        try:
            await ResourceStore(bus).delete("WorkflowRun", "default", name)
        finally:
            await bus.close()

    thread = threading.Thread(target=lambda: asyncio.run(delete()))
    thread.start()
    return thread


@pytest.mark.parametrize(
    ("name", "condition", "said"),
    [
        ("going-a", "delete", "workflowrun.plnt.work/going-a deleted"),
        (
            "going-b",
            "phase=Ready",
            "plnt: workflowruns 'going-b' was deleted while waiting for Ready",
        ),
    ],
    ids=["for-delete", "for-ready"],
)
def test_wait_says_a_large_run_is_deleted_once_it_is_gone_and_only_then(
    capfd: pytest.CaptureFixture[str],
    bus_url: str,
    tmp_path: Path,
    name: str,
    condition: str,
    said: str,
) -> None:
    manifest = tmp_path / "run.yaml"
    manifest.write_text(yaml.safe_dump(large_run(name)))
    assert plnt(capfd, "--nats", bus_url, "apply", "-f", str(manifest)).code == 0
    deleter = delete_later(bus_url, name, after_s=1.0)
    outcome = plnt(capfd, "--nats", bus_url, "wait", "wr", name, "--for", condition)
    deleter.join()
    assert said in (outcome.out if condition == "delete" else outcome.error_line)
    assert (outcome.code == 0) == (condition == "delete")
    assert "not found" in plnt(capfd, "--nats", bus_url, "get", "wr", name).error_line
