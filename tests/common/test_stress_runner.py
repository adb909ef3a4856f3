"""``python -m plnt_testkit.stress``: a command run with every core kept busy."""

import os
import subprocess
import sys
from pathlib import Path

TESTKIT = Path(__file__).resolve().parents[2] / "testkit"

# The command reports how many processes run the burner's loop beside it (its siblings).
COUNT_BURNERS = """
import os, pathlib, sys
me, parent = os.getpid(), os.getppid()
busy = 0
for entry in pathlib.Path("/proc").iterdir():
    if entry.name.isdigit() and int(entry.name) != me:
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == parent and stat[0] == "R":
            busy += 1
print(busy)
sys.exit(3)
"""


def test_the_command_runs_beside_one_busy_process_per_burner_and_its_exit_code_is_kept() -> None:
    stress = [sys.executable, "-m", "plnt_testkit.stress", "--burners", "2", "--"]
    done = subprocess.run(
        [*stress, sys.executable, "-c", COUNT_BURNERS],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(TESTKIT)),
        timeout=60,
    )

    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines()[-1] == "2", done.stdout
