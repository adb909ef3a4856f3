"""docs/asyncapi.yaml is what ``faststream docs gen`` makes of the services' code today."""

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from plnt_common.bus.asyncapi import saga_asyncapi_yaml

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "asyncapi.yaml"
REGENERATE = "docs/asyncapi.yaml no longer matches the code: regenerate it with `task asyncapi`"


def parsed(text: str) -> Any:
    # Compared parsed: FastStream keeps a broker's subscribers and publishers in a set,
    # so the order of channels varies from one generation to the next.
    return yaml.safe_load(text)


def test_the_committed_document_matches_the_declared_subscribers_and_publishers() -> None:
    assert parsed(DOCUMENT.read_text()) == parsed(saga_asyncapi_yaml()), REGENERATE


def test_faststream_docs_gen_writes_the_same_document(tmp_path: Path) -> None:
    out = tmp_path / "asyncapi.yaml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "faststream",
            "docs",
            "gen",
            "--yaml",
            "--factory",
            "plnt_common.bus.asyncapi:saga_app",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert parsed(out.read_text()) == parsed(DOCUMENT.read_text()), REGENERATE


def test_every_consumed_event_type_has_its_channel_and_typed_schema() -> None:
    document = parsed(DOCUMENT.read_text())
    addresses = {channel["address"] for channel in document["channels"].values()}
    assert "plnt.evt.spec.pulled.>" in addresses  # the installer's, per event type
    assert "plnt.evt.>" in addresses  # the watcher folds everything
    schemas = document["components"]["schemas"]
    assert schemas["SpecPulledEvent"]["properties"]["data"] == {
        "$ref": "#/components/schemas/SpecPulled"
    }
