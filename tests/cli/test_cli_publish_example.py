"""examples/ci/publish.yaml stays in step with the CLI: a GitHub Actions workflow run on
tags whose `plnt` commands parse with today's arguments."""

import shlex
from pathlib import Path

import yaml

from plnt_cli.main import build_parser

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ci" / "publish.yaml"


def test_the_ci_example_publishes_signed_on_tags_with_arguments_plnt_accepts() -> None:
    workflow = yaml.safe_load(EXAMPLE.read_text())
    assert workflow[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads `on:` as True
    script = "\n".join(step.get("run", "") for step in workflow["jobs"]["publish"]["steps"])
    commands = [
        shlex.split(line.replace("\\\n", " ").split("|")[0])
        for line in script.replace("\\\n", " ").splitlines()
        if line.strip().startswith("plnt ")
    ]
    assert len(commands) == 2, commands
    parsed = [build_parser().parse_args(command[1:]) for command in commands]
    assert [args.command for args in parsed] == ["publish", "publish"]
    assert parsed[0].sign_key is None and parsed[1].sign_key is not None
