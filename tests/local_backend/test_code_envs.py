"""Code environments of the local backend: made once per code digest (across threads and
processes), pip run offline from a local wheel directory against plnt's pinned packages,
and the decisions around them (which requirement pip could not install, the command)."""

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from plnt_common.code_archive import archive_digest
from plnt_common.errors import CodeInvalid, DependenciesFailed
from plnt_local_backend import logic
from plnt_local_backend.adapters.code_envs import BuildStopped, CodeEnvs, platform_constraints
from plnt_testkit.code_archives import build_wheel, code_archive, offline_pip_env

REQUIREMENT = "plnt_testwheel==1.0.0"
MAIN = "import plnt_testwheel, plnt_runner\nprint(plnt_testwheel.VERSION)\n"


@pytest.fixture
def envs(tmp_path: Path) -> CodeEnvs:
    wheels = tmp_path / "wheels"
    build_wheel(wheels)
    return CodeEnvs(root=tmp_path / "envs", base_env={**os.environ, **offline_pip_env(wheels)})


def test_an_environment_is_made_once_even_when_two_threads_ask_at_the_same_time(
    envs: CodeEnvs,
) -> None:
    archive = code_archive({"main.py": MAIN})
    digest = archive_digest(archive)
    env = envs.env_for(digest=digest, requirements=[REQUIREMENT])
    installs: list[int] = []
    errors: list[BaseException] = []

    def prepare() -> None:
        try:
            envs.prepare(
                env,
                digest=digest,
                archive=archive,
                requirements=[REQUIREMENT],
                on_install=installs.append,
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=prepare) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert installs == [1], "pip ran more than once for one environment"
    assert envs.is_made(env)
    envs.prepare(
        env, digest=digest, archive=archive, requirements=[REQUIREMENT], on_install=installs.append
    )
    assert installs == [1]
    ran = subprocess.run(
        [str(env.python), "main.py"], cwd=env.code_dir, capture_output=True, text=True, check=False
    )
    assert (ran.returncode, ran.stdout) == (0, "1.0.0\n"), ran.stderr


def test_other_requirements_for_the_same_code_get_an_environment_of_their_own(
    envs: CodeEnvs,
) -> None:
    digest = "sha256:" + "a" * 64
    one = envs.env_for(digest=digest, requirements=[REQUIREMENT])
    other = envs.env_for(digest=digest, requirements=[])
    assert one.path != other.path
    assert one.path.name.startswith("a" * 64) and other.path.name.startswith("a" * 64)


def test_an_archive_that_is_not_the_pinned_code_makes_no_environment(envs: CodeEnvs) -> None:
    archive = code_archive({"main.py": MAIN})
    digest = "sha256:" + "0" * 64
    env = envs.env_for(digest=digest, requirements=[])
    with pytest.raises(CodeInvalid, match="does not match its digest"):
        envs.prepare(env, digest=digest, archive=archive, requirements=[])
    assert not env.path.exists()


def test_a_requirement_pip_cannot_install_fails_naming_it_and_leaves_nothing_half_made(
    envs: CodeEnvs,
) -> None:
    archive = code_archive({"main.py": MAIN})
    digest = archive_digest(archive)
    requirements = [REQUIREMENT, "plnt_testwheel_absent>=2"]
    env = envs.env_for(digest=digest, requirements=requirements)
    with pytest.raises(DependenciesFailed) as caught:
        envs.prepare(env, digest=digest, archive=archive, requirements=requirements)
    assert str(caught.value).startswith("pip could not install plnt_testwheel_absent>=2: ")
    assert caught.value.reason == "DependenciesFailed"
    assert not env.path.exists() and not envs.is_made(env)


def test_a_requirement_that_would_replace_one_of_plnts_packages_is_refused(
    envs: CodeEnvs,
) -> None:
    archive = code_archive({"main.py": MAIN})
    digest = archive_digest(archive)
    env = envs.env_for(digest=digest, requirements=["pydantic<2"])
    with pytest.raises(DependenciesFailed) as caught:
        envs.prepare(env, digest=digest, archive=archive, requirements=["pydantic<2"])
    assert "pip could not install pydantic<2" in str(caught.value)
    assert "plnt keeps pydantic==" in str(caught.value)


def test_plnts_own_packages_are_pinned_at_their_installed_versions() -> None:
    pinned = dict(line.split("==") for line in platform_constraints().splitlines())
    assert {"plnt", "pydantic", "pydantic-core", "nats-py", "structlog"} <= pinned.keys()
    assert "pytest" not in pinned  # a dev extra, not a dependency


@pytest.mark.parametrize(
    ("output", "named"),
    [
        ("ERROR: No matching distribution found for rapidfuzz>=9", "rapidfuzz>=9,<10"),
        (
            "ERROR: Could not find a version that satisfies the requirement RapidFuzz>=9 "
            "(from versions: none)",
            "rapidfuzz>=9,<10",
        ),
        ("  Failed building wheel for numpy\nERROR: Failed to build numpy", "numpy"),
        (
            "ERROR: Cannot install rapidfuzz>=9,<10 because these package versions have "
            "conflicting dependencies.",
            "rapidfuzz>=9,<10",
        ),
        ("ERROR: something pip never said before", "rapidfuzz>=9,<10, requests"),
    ],
    ids=["no-distribution", "no-version", "build", "conflict", "unknown"],
)
def test_the_requirement_pip_could_not_install_is_read_from_its_output(
    output: str, named: str
) -> None:
    assert (
        logic.failed_requirement(output=output, requirements=["rapidfuzz>=9,<10", "requests"])
        == named
    )


@pytest.mark.parametrize(
    ("entrypoint", "argv"),
    [
        ("python -m plnt_runner", ["/env/bin/python", "-m", "plnt_runner"]),
        ("python3 -m ticket_triage", ["/env/bin/python", "-m", "ticket_triage"]),
        ("ticket-triage --port 1", ["ticket-triage", "--port", "1"]),
        ("python -c \"print('a b')\"", ["/env/bin/python", "-c", "print('a b')"]),
    ],
    ids=["default", "python3", "script", "quoted"],
)
def test_the_entrypoint_runs_with_the_environments_python(entrypoint: str, argv: list[str]) -> None:
    assert logic.entrypoint_command(entrypoint, python="/env/bin/python") == argv


def test_an_entrypoint_that_cannot_be_split_is_refused() -> None:
    with pytest.raises(ValueError, match="closing quotation"):
        logic.entrypoint_command("python -c 'unbalanced", python="/env/bin/python")


def test_a_stop_request_kills_a_running_pip_at_once_and_leaves_nothing_half_made(
    tmp_path: Path,
) -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts, never answers: pip waits
    port = silent.getsockname()[1]
    base_env = {
        **os.environ,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": f"http://127.0.0.1:{port}/wheels/",
        "PIP_TIMEOUT": "60",
        "PIP_RETRIES": "0",
    }
    envs = CodeEnvs(root=tmp_path / "envs", base_env=base_env)
    archive = code_archive({"main.py": MAIN})
    digest = archive_digest(archive)
    env = envs.env_for(digest=digest, requirements=[REQUIREMENT])
    stop = threading.Event()
    installing = threading.Event()
    outcome: list[BaseException] = []

    def prepare() -> None:
        try:
            envs.prepare(
                env,
                digest=digest,
                archive=archive,
                requirements=[REQUIREMENT],
                on_install=lambda _: installing.set(),
                stop=stop,
            )
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=prepare)
    thread.start()
    try:
        assert installing.wait(30), "pip never started"
        time.sleep(1.0)  # pip is waiting on the silent server now
        stopped_at = time.monotonic()
        stop.set()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the build did not stop"
        assert time.monotonic() - stopped_at < 3
    finally:
        stop.set()
        silent.close()
    assert len(outcome) == 1 and isinstance(outcome[0], BuildStopped), outcome
    assert not env.path.exists()
