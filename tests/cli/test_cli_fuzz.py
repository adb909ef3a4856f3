"""Fuzzing the CLI: generated arguments and manifests never end in a traceback.

Whatever a user types or applies, plnt either does it or says in one line what is wrong
(``cli_support.Outcome.error_line``); never "unexpected", never a traceback. The commands
run in-process against a real nats-server; ``up``, ``demo`` and ``serve`` would start
processes, so for those only the argument checks run. Examples are derandomized (the
same ones on every run, no example database) and bounded, so the test is quick and CI
sees what a developer saw.
"""

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import Outcome, plnt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plnt_cli.arguments import check_arguments
from plnt_cli.main import build_parser
from plnt_common.errors import PlntError

FUZZ = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

WORDS = [
    *("*", ">", "a b", "", "-", "x" * 41, "y" * 64, "Ünï", "a.b", "a\x00b", "review-responder"),
    *("wr", "workflowruns", "backends", "gadgets", "json", "yaml", "xml"),
    *("nan", "inf", "-inf", "-1", "0", "1e400", "60s", "2m", "h", "99999", "65536"),
    *("phase=Ready", "phase=Bogus", "phase=", "phase", "delete", "=Ready"),
    *("{", "[]", "null", '{"review": "hi"}', "@/no/such/file", "@binary", "@directory"),
    *("n" * 300, "@" + "n" * 300, "/dev/null", "/proc/self/mem"),
]
FLAGS = ["-n", "--namespace", "--timeout", "--for", "-o", "--output", "--data", "--stream"]
BUS_COMMANDS = ["apply", "get", "delete", "wait", "history", "replay", "invoke"]
START_COMMANDS = ["up", "demo"]
START_FLAGS = ["--router-port", "--nats-port", "--replicas", "--nats-sync-interval", "--data-dir"]


@pytest.fixture(scope="module")
def odd_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``@binary`` and ``@directory`` in the words name these."""
    root = tmp_path_factory.mktemp("odd")
    (root / "binary").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    (root / "directory").mkdir()
    return {"@binary": f"@{root / 'binary'}", "@directory": f"@{root / 'directory'}"}


def token() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(WORDS + FLAGS), st.text(max_size=12))


def assert_user_facing(outcome: Outcome) -> None:
    assert "Traceback" not in outcome.out + outcome.err, outcome
    assert "unexpected" not in outcome.out + outcome.err, outcome
    if outcome.code != 0:
        assert outcome.error_line


@FUZZ
@given(command=st.sampled_from(BUS_COMMANDS), tokens=st.lists(token(), max_size=6))
def test_any_arguments_to_a_bus_command_are_done_or_refused_in_one_line(
    capfd: pytest.CaptureFixture[str],
    bus_url: str,
    odd_files: dict[str, str],
    command: str,
    tokens: list[str],
) -> None:
    argv = [odd_files.get(word, word) for word in tokens]
    if command in ("wait", "delete"):
        argv = ["--timeout", "0.2", *argv]  # short, unless a generated --timeout follows
    # the bus holds no runs yet, so nothing named is found and no wait lasts
    assert_user_facing(plnt(capfd, "--nats", bus_url, command, *argv))


@FUZZ
@given(
    command=st.sampled_from(START_COMMANDS),
    tokens=st.lists(st.one_of(st.sampled_from(START_FLAGS), token()), max_size=6),
)
def test_any_arguments_to_up_or_demo_are_checked_in_one_line_before_anything_starts(
    capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    tokens: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # a --data-dir is created: here, not in the checkout
    capfd.readouterr()
    try:
        check_arguments(build_parser().parse_args([command, *tokens]))
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    except PlntError as exc:
        print(f"plnt: {exc}", file=sys.stderr)
        code = 1
    captured = capfd.readouterr()
    assert_user_facing(Outcome(code=code, out=captured.out, err=captured.err))


VALID_RUN: dict[str, Any] = {
    "apiVersion": "plnt.work/v1",
    "kind": "WorkflowRun",
    "metadata": {"name": "fuzzed"},
    "spec": {
        "workflow": {"ref": "fuzzed@1.0.0", "registry": "file:./registry"},
        "backend": {"cluster": "gpu-cluster-01", "gpuCount": 1},
        "replicas": {"min": 1, "max": 2},
        "canary": {"trafficPercent": 5},
        "smokeTest": {"invocations": 3, "payload": {"review": "hi"}},
    },
}
PATHS = [
    (),
    ("apiVersion",),
    ("kind",),
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "labels"),
    ("spec",),
    ("spec", "workflow"),
    ("spec", "workflow", "ref"),
    ("spec", "workflow", "registry"),
    ("spec", "workflow", "integrityHash"),
    ("spec", "backend"),
    ("spec", "backend", "gpuCount"),
    ("spec", "replicas", "min"),
    ("spec", "canary", "trafficPercent"),
    ("spec", "smokeTest"),
    ("spec", "smokeTest", "payload"),
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["file:", "file:../..", "file:///", "s3://", "oci://x", "sha256:00", "x@1"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def mutated(path: tuple[str, ...], value: Any) -> Any:
    if not path:
        return value
    document = copy.deepcopy(VALID_RUN)
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return document


@FUZZ
@given(path=st.sampled_from(PATHS), value=VALUES)
def test_any_manifest_is_applied_or_refused_in_one_line(
    capfd: pytest.CaptureFixture[str], bus_url: str, tmp_path: Path, path: Any, value: Any
) -> None:
    (tmp_path / "registry").mkdir(exist_ok=True)
    manifest = tmp_path / "run.yaml"
    manifest.write_text(yaml.safe_dump(mutated(path, value), allow_unicode=True))
    assert_user_facing(plnt(capfd, "--nats", bus_url, "apply", "-f", str(manifest)))


@FUZZ
@given(raw=st.one_of(st.binary(max_size=64), st.text(max_size=64).map(str.encode)))
def test_any_bytes_given_to_apply_are_applied_or_refused_in_one_line(
    capfd: pytest.CaptureFixture[str], bus_url: str, tmp_path: Path, raw: bytes
) -> None:
    manifest = tmp_path / "raw.yaml"
    manifest.write_bytes(raw)
    assert_user_facing(plnt(capfd, "--nats", bus_url, "apply", "-f", str(manifest)))
