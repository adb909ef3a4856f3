"""Reading resource files: YAML or JSON, one or many documents, each validated.

``-f`` takes a file, ``-`` for stdin, or a directory (its ``*.yaml`` and ``*.yml`` files
in name order, like kubectl). A WorkflowRun's ``registry: file:<relative path>`` is
resolved against the directory of the file that names it (the working directory for
stdin) and stored as ``file:///absolute/path``, so a manifest can ship beside its registry.
"""

import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from plnt_common.errors import SpecInvalid
from plnt_common.names import DEFAULT_NAMESPACE
from plnt_common.resources import Resource, parse_resource

MANIFEST_SUFFIXES = (".yaml", ".yml")
RELATIVE_FILE_REGISTRY = "file:"


@dataclass(frozen=True)
class Document:
    """One YAML document and where it came from."""

    body: Any
    source: str
    """The file (or ``stdin``) it was read from, for messages."""
    base: Path
    """Where relative ``file:`` registries in it are resolved."""


def read_documents(path: str) -> list[Document]:
    """The non-empty documents of ``path``; raises ``SpecInvalid`` naming the problem."""
    if path == "-":
        return _parse_text(sys.stdin.read(), source="stdin", base=Path.cwd())
    target = Path(path)
    kind = path_kind(target, what=path)
    if kind == "directory":
        files = sorted(p for p in target.iterdir() if p.suffix in MANIFEST_SUFFIXES and p.is_file())
        if not files:
            raise SpecInvalid(f"{path}: a directory without *.yaml or *.yml files")
        return [document for file in files for document in _read_file(file)]
    if kind == "missing":
        raise SpecInvalid(f"{path}: no such file")
    return _read_file(target)


def path_kind(path: Path, *, what: str) -> Literal["directory", "file", "missing"]:
    """What is at ``path``; a path the system refuses (too long, no permission) raises
    ``SpecInvalid`` starting with ``what``."""
    try:
        return "directory" if path.is_dir() else "file" if path.exists() else "missing"
    except OSError as exc:
        raise SpecInvalid(f"{what}: {exc.strerror or exc}") from None


def _read_file(file: Path) -> list[Document]:
    try:
        text = file.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise SpecInvalid(f"{file}: not a text file (not UTF-8)") from None
    except OSError as exc:
        raise SpecInvalid(f"{file}: cannot read it: {exc.strerror or exc}") from None
    return _parse_text(text, source=str(file), base=file.resolve().parent)


def _parse_text(text: str, *, source: str, base: Path) -> list[Document]:
    try:
        bodies = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        # PyYAML's "found unexpected end of stream" reads like plnt's own bug report
        problem = problem.replace("found unexpected", "did not expect")
        raise SpecInvalid(f"{source}: not valid YAML{at}: {problem}") from None
    if not bodies:
        raise SpecInvalid(f"{source}: no resources in the file")
    return [Document(body=body, source=source, base=base) for body in bodies]


def parse_documents(documents: list[Document], *, namespace: str | None) -> list[Resource]:
    """Validate every document before any is applied, so a bad file changes nothing."""
    per_source = Counter(document.source for document in documents)
    seen: Counter[str] = Counter()
    resources = []
    places: dict[tuple[str, str, str], list[str]] = {}
    for document in documents:
        seen[document.source] += 1
        where = [document.source] if len(per_source) > 1 else []
        if per_source[document.source] > 1:
            where.append(f"document {seen[document.source]}")
        try:
            resources.append(_parsed(document, namespace=namespace))
        except SpecInvalid as exc:
            raise SpecInvalid(": ".join([*where, str(exc)])) from None
        places.setdefault(_identity(resources[-1]), []).append(" ".join(where))
    for (kind, _, name), found in places.items():
        if len(found) > 1:  # only the last would stay: surely not what was meant
            raise SpecInvalid(f"{kind} {name!r} is given more than once ({', '.join(found)})")
    return resources


def _identity(resource: Resource) -> tuple[str, str, str]:
    """Kind, namespace (a WorkflowRun's defaults to ``default``) and name: one stored object."""
    namespace = (
        resource.metadata.namespace or DEFAULT_NAMESPACE if resource.kind == "WorkflowRun" else ""
    )
    return resource.kind, namespace, resource.metadata.name


def _parsed(document: Document, *, namespace: str | None) -> Resource:
    body = document.body
    if isinstance(body, dict) and body.get("kind") == "WorkflowRun":
        metadata = body.get("metadata")
        if namespace and isinstance(metadata, dict):
            metadata.setdefault("namespace", namespace)
        _resolve_relative_registry(body, base=document.base)
    return parse_resource(body)


def _resolve_relative_registry(body: dict[str, Any], *, base: Path) -> None:
    """``file:./registry`` -> ``file:///<base>/registry``; anything else is left to validation."""
    spec = body.get("spec")
    workflow = spec.get("workflow") if isinstance(spec, dict) else None
    if not isinstance(workflow, dict):
        return
    registry = workflow.get("registry")
    if not isinstance(registry, str) or not registry.startswith(RELATIVE_FILE_REGISTRY):
        return
    relative = registry.removeprefix(RELATIVE_FILE_REGISTRY)
    if relative.startswith("/") or not relative:
        return  # file:///abs/path (or a malformed URL the model names)
    directory = base / relative
    metadata = body.get("metadata")
    name = metadata.get("name", "?") if isinstance(metadata, dict) else "?"
    where = f"WorkflowRun {name!r}: registry {registry!r}"
    if path_kind(directory, what=where) != "directory":
        raise SpecInvalid(f"{where}: {os.path.normpath(directory)} is not a directory")
    workflow["registry"] = directory.resolve().as_uri()
