"""The workflow a run pulled, as the playground draws it: a form from its ``input`` schema
and its steps' DAG.

The puller stored the spec bytes in ``plnt-specs`` under the digest the run's status names
(``status.specDigest``); the console reads them back and never writes there. The form is
derived here (pure) so the page only renders it: a property of a kind the form cannot
hold (object, array, a union...) stays in the JSON body the page also shows.
"""

from typing import Any

from nats.errors import Error as NatsError
from nats.js.errors import ObjectDeletedError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from plnt_common.errors import BusUnavailable, SpecNotFound
from plnt_common.subjects import SPECS_OBJECT_STORE
from plnt_common.workflow import Workflow, parse_workflow

FORM_KINDS = ("string", "number", "integer", "boolean")
"""JSON Schema types a form field holds; ``enum`` of scalars becomes a choice."""


async def read_pulled(specs: ObjectStore, digest: str) -> Workflow:
    """The Workflow stored under ``digest``.

    Raises ``SpecNotFound`` when no such object exists, ``SpecInvalid`` when its bytes do
    not parse, ``BusUnavailable`` when NATS does not answer.
    """
    try:
        result = await specs.get(digest)
    except (ObjectNotFoundError, ObjectDeletedError):
        raise SpecNotFound(
            f"spec {digest} is not in the object store {SPECS_OBJECT_STORE}"
        ) from None
    except (NatsError, TimeoutError, OSError) as exc:
        raise BusUnavailable(f"reading spec {digest} failed: {exc!r}") from None
    return parse_workflow(bytes(result.data or b""))


def input_form(schema: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """One field per property the form can hold, in the schema's order; None when the
    schema declares no object properties (the page then offers the JSON body alone).

    Each field: ``name``, ``title``, ``kind`` (string|number|integer|boolean|enum),
    ``required``, ``options`` (enum only) and ``description``.
    """
    if not schema or schema.get("type") != "object":
        return None
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return None
    required = set(schema.get("required") or ())
    fields = []
    for name, definition in properties.items():
        kind = _kind(definition)
        if kind is None:
            continue
        field: dict[str, Any] = {
            "name": name,
            "title": str(definition.get("title") or name),
            "kind": kind,
            "required": name in required,
            "description": str(definition.get("description") or ""),
        }
        if kind == "enum":
            field["options"] = list(definition["enum"])
        fields.append(field)
    return fields


def _kind(definition: Any) -> str | None:
    if not isinstance(definition, dict):
        return None
    options = definition.get("enum")
    if isinstance(options, list) and options:
        scalar = all(isinstance(o, str | int | float | bool) for o in options)
        return "enum" if scalar else None
    kind = definition.get("type")
    return kind if kind in FORM_KINDS else None


def workflow_view(workflow: Workflow, *, digest: str) -> dict[str, Any]:
    """What ``GET /api/runs/{ns}/{name}/workflow`` answers."""
    spec = workflow.spec
    return {
        "name": workflow.metadata.name,
        "version": workflow.metadata.version,
        "digest": digest,
        "input": spec.input,
        "form": input_form(spec.input),
        "steps": [
            {"id": step.id, "tool": step.tool, "needs": list(step.deps)} for step in spec.steps
        ],
    }
