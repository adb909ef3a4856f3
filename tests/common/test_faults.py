"""Fault injection: inert unless armed, parks once per point, refuses bad settings by name."""

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from plnt_common import faults
from plnt_common.faults import ArmedFaults, FaultSettings, parse


def test_nothing_is_armed_without_the_setting() -> None:
    assert parse(FaultSettings(pause="")) is None
    assert parse(FaultSettings(pause=" , ")) is None


def test_armed_points_are_read_from_a_comma_separated_list(tmp_path: Path) -> None:
    armed = parse(
        FaultSettings(
            pause="installer:spec.pulled:after_effect, smoke:canary.installed:before_ack",
            report_dir=tmp_path,
        )
    )
    assert armed == ArmedFaults(
        frozenset(
            {
                ("installer", "spec.pulled", "after_effect"),
                ("smoke", "canary.installed", "before_ack"),
            }
        ),
        tmp_path,
    )


@pytest.mark.parametrize(
    ("pause", "named"),
    [
        ("installer:spec.pulled", "'installer:spec.pulled'"),
        ("installer:spec.pulled:halfway", "'installer:spec.pulled:halfway'"),
        ("installer::after_effect", "'installer::after_effect'"),
    ],
    ids=["two-parts", "unknown-point", "empty-step"],
)
def test_a_bad_entry_is_refused_naming_it(tmp_path: Path, pause: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        parse(FaultSettings(pause=pause, report_dir=tmp_path))


def test_a_service_started_with_a_bad_setting_exits_with_one_line(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PLNT_FAULT_PAUSE": "installer:spec.pulled:halfway",
        "PLNT_FAULT_REPORT_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", "import plnt_common.faults"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "plnt: PLNT_FAULT_PAUSE entry 'installer:spec.pulled:halfway' is not "
        "<service>:<step>:<point> with a point among after_effect, before_ack"
    ]


async def test_an_armed_point_parks_once_and_reports_its_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        faults, "_armed", ArmedFaults(frozenset({("smoke", "x", "after_effect")}), tmp_path)
    )
    parked = asyncio.create_task(faults.pause_point("smoke", "x", "after_effect"))
    marker = tmp_path / "smoke.x.after_effect"
    for _ in range(100):
        if marker.exists() and marker.read_text():
            break
        await asyncio.sleep(0.01)
    assert marker.read_text() == str(os.getpid())
    await asyncio.sleep(0.1)
    assert not parked.done()
    # every later arrival passes, as does any point that is not armed
    await asyncio.wait_for(faults.pause_point("smoke", "x", "after_effect"), 1)
    await asyncio.wait_for(faults.pause_point("smoke", "x", "before_ack"), 1)
    await asyncio.wait_for(faults.pause_point("puller", "x", "after_effect"), 1)
    parked.cancel()


class Killed(BaseException):
    """A SIGKILL arriving mid-report, as a process parked at another point is killed."""


async def test_a_process_killed_while_reporting_leaves_the_point_to_the_next_arrival(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        faults, "_armed", ArmedFaults(frozenset({("smoke", "x", "after_effect")}), tmp_path)
    )
    real_getpid = os.getpid

    def killed_once() -> int:
        monkeypatch.setattr(faults.os, "getpid", real_getpid)
        raise Killed

    monkeypatch.setattr(faults.os, "getpid", killed_once)
    with pytest.raises(Killed):
        await faults.pause_point("smoke", "x", "after_effect")
    marker = tmp_path / "smoke.x.after_effect"
    assert not marker.exists(), "an empty marker: the point would pass unreported for ever"

    parked = asyncio.create_task(faults.pause_point("smoke", "x", "after_effect"))
    await asyncio.sleep(0.1)
    assert not parked.done()
    assert marker.read_text() == str(real_getpid())
    parked.cancel()


async def test_unarmed_hooks_return_at_once() -> None:
    assert faults._armed is None
    await asyncio.wait_for(faults.pause_point("installer", "spec.pulled", "after_effect"), 1)


def test_armed_faults_may_shorten_the_ack_wait_and_nothing_else_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert faults.ack_wait_s(30.0) == 30.0
    armed = parse(FaultSettings(pause="smoke:x:before_ack", report_dir=tmp_path, ack_wait_s=2.0))
    monkeypatch.setattr(faults, "_armed", armed)
    assert faults.ack_wait_s(30.0) == 2.0
    monkeypatch.setattr(
        faults, "_armed", parse(FaultSettings(pause="smoke:x:before_ack", report_dir=tmp_path))
    )
    assert faults.ack_wait_s(30.0) == 30.0


def test_a_bad_ack_wait_exits_with_one_line(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PLNT_FAULT_PAUSE": "smoke:x:before_ack",
        "PLNT_FAULT_REPORT_DIR": str(tmp_path),
        "PLNT_FAULT_ACK_WAIT_S": "0",
    }
    done = subprocess.run(
        [sys.executable, "-c", "import plnt_common.faults"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr.strip()) == (
        1,
        "plnt: PLNT_FAULT_ACK_WAIT_S: Input should be greater than 0",
    )
