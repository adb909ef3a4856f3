"""Mutation testing of the modules that carry the saga's promises (``task mutate``).

mutmut 3 mutates code under ``src/`` (or the project root) and imports it from its
``mutants/`` copy; plnt's packages live under ``libs/`` and ``services/*/``. This script
stages a copy with every package under ``src/``, the tests and the pytest settings,
then runs mutmut there against the fast tests of those modules, and prints the result
(``--results`` only prints the last run's). Survivors are listed in docs/reliability.md.

    python tests/mutation/mutate.py [--dir DIR] [--max-children N] [--results]
        [--module plnt_common/bus/bus.py ...] [--tests 'tests/common/test_bus_publish.py' ...]
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MUTATED = (
    "plnt_common/bus/bus.py",
    "plnt_common/bus/consumer.py",
    "plnt_common/bus/pull_feed.py",
    "plnt_common/bus/durables.py",
    "plnt_common/bus/saga.py",
    "plnt_common/bus/kv_snapshot.py",
    "plnt_common/bus/kv_batch.py",
    "plnt_common/bus/replay.py",
    "plnt_common/bus/replay_workers.py",
    "plnt_common/saga.py",
    "plnt_common/projection.py",
    "plnt_promoter/logic.py",
    "plnt_installer/logic.py",
    "plnt_router/logic.py",
)
"""The bus, the consumer, its pull feed and its durable's start, the bucket listing and
batch writes, replay and its fold workers, saga classification, the projection fold, the
promoter's and installer's decisions, the router's choice of target."""

TESTS = (
    "tests/common/test_bus_*.py",
    "tests/common/test_pull_feed.py",
    "tests/common/test_kv_snapshot.py",
    "tests/common/test_kv_batch.py",
    "tests/common/test_projection.py",
    "tests/services/test_saga_logic.py",
    "tests/router/test_router_logic.py",
)
"""Fast tests of those modules (real nats-server where the bus is concerned); globs."""


def package_dirs() -> list[Path]:
    return [ROOT / "libs" / "plnt_common", *sorted((ROOT / "services").glob("*/plnt_*"))]


def stage(target: Path, mutated: tuple[str, ...], tests: tuple[str, ...]) -> None:
    """A copy of the project in the layout mutmut expects, mutating ``mutated`` against
    the test files matching ``tests``; its ``mutants/`` is kept."""
    src = target / "src"
    shutil.rmtree(src, ignore_errors=True)
    for package in package_dirs():
        shutil.copytree(package, src / package.name, ignore=shutil.ignore_patterns("__pycache__"))
    for tree in ("tests", "testkit"):  # the tests import the dev-only test kit
        shutil.rmtree(target / tree, ignore_errors=True)
        shutil.copytree(ROOT / tree, target / tree, ignore=shutil.ignore_patterns("__pycache__"))
    settings = (ROOT / "pyproject.toml").read_text()
    settings += "\n[tool.mutmut]\n"
    settings += f"source_paths = {['src']!r}\n".replace("'", '"')
    settings += 'also_copy = ["testkit"]\n'
    settings += f"only_mutate = {[f'src/{m}' for m in mutated]!r}\n".replace("'", '"')
    selected = sorted(str(p.relative_to(ROOT)) for pattern in tests for p in ROOT.glob(pattern))
    settings += f"pytest_add_cli_args_test_selection = {selected!r}\n".replace("'", '"')
    settings += 'pytest_add_cli_args = ["-p", "no:cacheprovider", "-x", "-q"]\n'
    (target / "pyproject.toml").write_text(settings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "plnt-mutation")
    parser.add_argument("--max-children", type=int, default=2, help="mutants run at once")
    parser.add_argument("--results", action="store_true", help="print the last run's result")
    parser.add_argument(
        "--module",
        action="append",
        help="mutate only these, paths under the packages like plnt_common/bus/bus.py "
        "(repeatable; default: the modules above)",
    )
    parser.add_argument(
        "--tests", action="append", help="only the test files matching these globs (repeatable)"
    )
    args = parser.parse_args()
    staged = {package.name: package for package in package_dirs()}
    for module in args.module or ():
        package, _, rest = module.partition("/")
        if package not in staged or not (staged[package] / rest).is_file():
            parser.error(f"--module {module}: no such module under the packages")
    args.dir.mkdir(parents=True, exist_ok=True)
    mutmut = [sys.executable, "-m", "mutmut"]
    if not args.results:
        stage(args.dir, tuple(args.module or MUTATED), tuple(args.tests or TESTS))
        shutil.rmtree(args.dir / "mutants", ignore_errors=True)  # mutmut reuses stale copies
        run = [*mutmut, "run", "--max-children", str(args.max_children)]
        subprocess.run(run, cwd=args.dir, check=False)
    done = subprocess.run([*mutmut, "results", "--all", "true"], cwd=args.dir, check=False)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
