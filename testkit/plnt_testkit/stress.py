"""Run a command with every core kept busy, as on a loaded CI runner or laptop.

``python -m plnt_testkit.stress [--burners N] -- COMMAND...`` starts N CPU-bound processes
(default: one per core), runs COMMAND, stops the burners and exits with COMMAND's code.
``task stress`` runs the test suite this way: a test that passes only on an idle machine
waits on time instead of state, or hides a race.
"""

import argparse
import multiprocessing
import os
import subprocess
import sys


def _burn() -> None:
    while True:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m plnt_testkit.stress")
    parser.add_argument("--burners", type=int, default=os.cpu_count() or 1)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = [part for part in args.command if part != "--"] if args.command else []
    if not command:
        parser.error("give the command to run after --")
    burners = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(args.burners)]
    for burner in burners:
        burner.start()
    print(f"stress: {len(burners)} CPU-bound processes while running {' '.join(command)}")
    try:
        return subprocess.call(command)
    finally:
        for burner in burners:
            burner.kill()
            burner.join()


if __name__ == "__main__":
    sys.exit(main())
