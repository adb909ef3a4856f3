"""Reading resource files: YAML or JSON, one or many documents, each validated."""

import sys
from pathlib import Path
from typing import Any

import yaml

from plnt_common.errors import SpecInvalid
from plnt_common.resources import Resource, parse_resource


def read_documents(path: str) -> list[dict[str, Any]]:
    """The non-empty documents of ``path`` (``-`` for stdin); raises ``SpecInvalid``."""
    if path == "-":
        text, where = sys.stdin.read(), "stdin"
    else:
        file = Path(path)
        if not file.is_file():
            raise SpecInvalid(f"{path}: no such file")
        text, where = file.read_text(), path
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecInvalid(f"{where}: not valid YAML{at}: {problem}") from None
    if not documents:
        raise SpecInvalid(f"{where}: no resources in the file")
    return documents


def parse_documents(documents: list[dict[str, Any]], *, namespace: str | None) -> list[Resource]:
    """Validate every document before any is applied, so a bad file changes nothing."""
    resources = []
    for index, document in enumerate(documents, start=1):
        if namespace and isinstance(document, dict) and document.get("kind") == "WorkflowRun":
            document.setdefault("metadata", {}).setdefault("namespace", namespace)
        try:
            resources.append(parse_resource(document))
        except SpecInvalid as exc:
            prefix = f"document {index}: " if len(documents) > 1 else ""
            raise SpecInvalid(f"{prefix}{exc}") from None
    return resources
