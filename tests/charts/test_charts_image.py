"""The Dockerfile, checked without Docker: one image for every service with `plnt` as the
entrypoint, python:3.11-slim, a non-root user, a pinned and checksum-verified helm, and
build inputs that .dockerignore does not hide."""

import fnmatch
import re
import shlex

import pytest
from plnt_chart_kit import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()
DOCKERIGNORE = [
    line.strip()
    for line in (REPO / ".dockerignore").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def _args() -> dict[str, str]:
    args = {}
    for keyword, rest in _instructions():
        if keyword == "ARG" and "=" in rest:
            key, value = rest.split("=", 1)
            args[key] = value
    return args


def _final_stage() -> list[tuple[str, str]]:
    instructions = _instructions()
    last_from = max(i for i, (k, _) in enumerate(instructions) if k == "FROM")
    return instructions[last_from:]


def test_every_stage_is_python_3_11_slim() -> None:
    assert _args()["PYTHON_IMAGE"] == "python:3.11-slim"
    froms = [rest for keyword, rest in _instructions() if keyword == "FROM"]
    assert froms and all(rest.split()[0] == "${PYTHON_IMAGE}" for rest in froms)


def test_final_stage_runs_plnt_as_a_non_root_user() -> None:
    final = dict(_final_stage())
    user = final["USER"].split(":")[0]
    assert user.isdigit() and int(user) != 0
    assert final["ENTRYPOINT"] == '["plnt"]'
    assert final["CMD"].startswith('["serve"')


def test_runtime_uid_matches_the_charts_security_context() -> None:
    import yaml

    for chart in ("plnt", "plnt-runner"):
        values = yaml.safe_load((REPO / "charts" / chart / "values.yaml").read_text())
        assert values["podSecurityContext"]["runAsUser"] == int(
            dict(_final_stage())["USER"].split(":")[0]
        )


def test_helm_is_pinned_and_checksum_verified() -> None:
    args = _args()
    assert re.fullmatch(r"v3\.\d+\.\d+", args["HELM_VERSION"])
    for arch in ("AMD64", "ARM64"):
        assert re.fullmatch(r"[0-9a-f]{64}", args[f"HELM_SHA256_{arch}"])
    assert args["HELM_SHA256_AMD64"] != args["HELM_SHA256_ARM64"]
    runs = " ".join(rest for keyword, rest in _instructions() if keyword == "RUN")
    assert "https://get.helm.sh/helm-${HELM_VERSION}-linux-${arch}.tar.gz" in runs
    assert "sha256sum -c -" in runs
    final = [rest for keyword, rest in _final_stage() if keyword == "COPY"]
    assert "--from=helm /usr/local/bin/helm /usr/local/bin/helm" in final


def test_the_project_is_pip_installed() -> None:
    runs = [rest for keyword, rest in _instructions() if keyword == "RUN"]
    assert any("pip install ." in run for run in runs)


def _ignored(path: str) -> bool:
    parts = path.strip("/").split("/")
    for pattern in DOCKERIGNORE:
        pattern = pattern.strip("/")
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            if fnmatch.fnmatch(prefix, pattern) or fnmatch.fnmatch(
                prefix, pattern.removeprefix("**/")
            ):
                return True
    return False


def _copy_sources() -> list[str]:
    sources = []
    for keyword, rest in _instructions():
        if keyword != "COPY" or rest.startswith("--from"):
            continue
        *srcs, _dest = shlex.split(rest)
        sources.extend(srcs)
    return sources


@pytest.mark.parametrize("source", _copy_sources())
def test_build_inputs_exist_and_are_not_docker_ignored(source: str) -> None:
    assert (REPO / source).exists(), source
    assert not _ignored(source), f"{source} is excluded by .dockerignore"


def test_dockerignore_keeps_tests_and_vcs_out_of_the_context() -> None:
    for path in (".git", "tests/charts", "libs/plnt_common/__pycache__", "plnt.egg-info", "bench"):
        assert _ignored(path), path
    for path in (
        "libs/plnt_common/resources.py",
        "services/cli/plnt_cli/main.py",
        "charts/plnt-runner/Chart.yaml",
    ):
        assert not _ignored(path), path
