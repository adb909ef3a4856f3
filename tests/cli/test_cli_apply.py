"""``plnt apply``: files, directories, stdin and file registries beside the manifest."""

import io
import json
from pathlib import Path

import pytest
import yaml
from cli_support import plnt, run_manifest, write_yaml

from plnt_common.workflow import spec_digest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_apply_of_a_directory_applies_its_yaml_files_in_name_order(
    capfd: pytest.CaptureFixture[str], bus_url: str, tmp_path: Path
) -> None:
    write_yaml(tmp_path / "20-run.yml", run_manifest("dir-run"))
    write_yaml(
        tmp_path / "10-backend.yaml", yaml.safe_load((EXAMPLES / "backend-local.yaml").read_text())
    )
    (tmp_path / "notes.txt").write_text("not a manifest")
    outcome = plnt(capfd, "--nats", bus_url, "apply", "-f", str(tmp_path))
    assert outcome.code == 0, outcome
    assert outcome.out.splitlines() == [
        "plntbackend.plnt.work/gpu-cluster-01 created",
        "workflowrun.plnt.work/dir-run created",
    ]


def test_apply_of_a_directory_names_the_file_of_a_bad_document_and_applies_nothing(
    capfd: pytest.CaptureFixture[str], bus_url: str, tmp_path: Path
) -> None:
    write_yaml(tmp_path / "a.yaml", run_manifest("dir-good"))
    write_yaml(tmp_path / "b.yaml", run_manifest("Dir_Bad"))
    line = plnt(capfd, "--nats", bus_url, "apply", "-f", str(tmp_path)).error_line
    assert line.startswith(f"plnt: {tmp_path / 'b.yaml'}: WorkflowRun 'Dir_Bad'")
    assert "not found" in plnt(capfd, "--nats", bus_url, "get", "wr", "dir-good").error_line


def test_a_relative_file_registry_is_resolved_against_the_manifest_directory(
    capfd: pytest.CaptureFixture[str],
    bus_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = tmp_path / "project"
    (project / "registry").mkdir(parents=True)
    manifest = run_manifest("rel-run")
    manifest["spec"]["workflow"]["registry"] = "file:./registry"
    write_yaml(project / "run.yaml", manifest)
    monkeypatch.chdir(tmp_path)  # not the manifest's directory
    assert plnt(capfd, "--nats", bus_url, "apply", "-f", "project/run.yaml").code == 0
    stored = json.loads(plnt(capfd, "--nats", bus_url, "get", "wr", "rel-run", "-o", "json").out)
    assert stored["spec"]["workflow"]["registry"] == (project / "registry").as_uri()


def test_a_relative_file_registry_that_does_not_exist_is_named(
    capfd: pytest.CaptureFixture[str], bus_url: str, tmp_path: Path
) -> None:
    manifest = run_manifest("rel-missing")
    manifest["spec"]["workflow"]["registry"] = "file:../nowhere"
    path = write_yaml(tmp_path / "run.yaml", manifest)
    line = plnt(capfd, "--nats", bus_url, "apply", "-f", str(path)).error_line
    assert line == (
        f"plnt: WorkflowRun 'rel-missing': registry 'file:../nowhere': "
        f"{tmp_path.parent / 'nowhere'} is not a directory"
    )


def test_the_local_example_pins_the_digest_of_the_spec_it_ships_with() -> None:
    run = yaml.safe_load((EXAMPLES / "workflowrun-local.yaml").read_text())
    workflow = run["spec"]["workflow"]
    name, version = workflow["ref"].split("@")
    spec = EXAMPLES / workflow["registry"].removeprefix("file:") / name / version / "workflow.yaml"
    assert workflow["integrityHash"] == spec_digest(spec.read_bytes())


def test_a_relative_file_registry_from_stdin_is_resolved_against_the_working_directory(
    capfd: pytest.CaptureFixture[str],
    bus_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "specs").mkdir()
    manifest = run_manifest("stdin-run")
    manifest["spec"]["workflow"]["registry"] = "file:specs"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(manifest)))
    assert plnt(capfd, "--nats", bus_url, "apply", "-f", "-").code == 0
    stored = json.loads(plnt(capfd, "--nats", bus_url, "get", "wr", "stdin-run", "-o", "json").out)
    assert stored["spec"]["workflow"]["registry"] == (tmp_path / "specs").as_uri()


def test_a_resource_given_twice_is_refused_naming_both_places_and_nothing_is_applied(
    capfd: pytest.CaptureFixture[str], bus_url: str, tmp_path: Path
) -> None:
    write_yaml(tmp_path / "a.yaml", run_manifest("twice"), run_manifest("once"))
    write_yaml(
        tmp_path / "b.yaml",
        run_manifest("twice") | {"metadata": {"name": "twice", "namespace": "default"}},
    )
    line = plnt(capfd, "--nats", bus_url, "apply", "-f", str(tmp_path)).error_line
    assert line == (
        f"plnt: WorkflowRun 'twice' is given more than once "
        f"({tmp_path / 'a.yaml'} document 1, {tmp_path / 'b.yaml'})"
    )
    assert "not found" in plnt(capfd, "--nats", bus_url, "get", "wr", "once").error_line
