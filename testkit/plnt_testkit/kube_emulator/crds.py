"""CustomResourceDefinitions as the emulator serves them: the types and schemas they add.

``served_versions`` reads an ``apiextensions.k8s.io/v1`` CRD into one ``ServedVersion`` per
served version: the ``ResourceType`` (names, short names, categories, scope, the status
subresource, printer columns) and the ``CrdSchema`` that admits its objects. ``check_crd``
refuses what the API server refuses in a CRD's names and versions, with a 422 naming the
field; it does not check that a schema is structural. ``project_crds`` loads the project's
own CRDs from ``crds``. Nothing here keeps state.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from plnt_testkit.kube_emulator.schema import CrdSchema
from plnt_testkit.kube_emulator.types import CUSTOM_RESOURCE_DEFINITIONS, ApiError, ResourceType

PROJECT_CRDS = Path(__file__).resolve().parents[3] / "crds"
CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
"""The finalizer a CRD carries while the server deletes its objects."""


@dataclass(frozen=True)
class ServedVersion:
    """One served version of a CRD: its type and the schema its objects are admitted by."""

    rtype: ResourceType
    schema: CrdSchema
    openapi: dict[str, Any]
    """The version's ``openAPIV3Schema`` as given (for the OpenAPI v3 documents)."""


def project_crds() -> tuple[dict[str, Any], ...]:
    """The project's CRDs (``crds/*.yaml``), in file name order."""
    return tuple(yaml.safe_load(path.read_text()) for path in sorted(PROJECT_CRDS.glob("*.yaml")))


def _invalid(name: str, causes: list[tuple[str, str]]) -> ApiError:
    message = "; ".join(f"{path}: {why}" for path, why in causes)
    return ApiError.invalid(
        CUSTOM_RESOURCE_DEFINITIONS,
        name,
        f"[{message}]" if len(causes) > 1 else message,
        causes=[
            {"reason": "FieldValueInvalid", "message": why, "field": path} for path, why in causes
        ],
    )


def check_crd(crd: dict[str, Any]) -> None:
    """422 when the API server would refuse this CRD's names, scope or versions."""
    name = (crd.get("metadata") or {}).get("name", "")
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    causes: list[tuple[str, str]] = []
    group, plural = spec.get("group") or "", names.get("plural") or ""
    if not group or "." not in group:
        causes.append(
            ("spec.group", f'Invalid value: "{group}": should be a domain with at least one dot')
        )
    if not plural:
        causes.append(("spec.names.plural", "Required value"))
    if not names.get("kind"):
        causes.append(("spec.names.kind", "Required value"))
    if plural and group and name != f"{plural}.{group}":
        causes.append(
            ("metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group')
        )
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(
            (
                "spec.scope",
                f'Unsupported value: "{spec.get("scope")}": '
                'supported values: "Cluster", "Namespaced"',
            )
        )
    versions = spec.get("versions") or []
    if not versions:
        causes.append(
            (
                "spec.versions",
                "Invalid value: null: must have exactly one version marked as storage version",
            )
        )
    elif sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(
            (
                "spec.versions",
                "Invalid value: must have exactly one version marked as storage version",
            )
        )
    for index, version in enumerate(versions):
        if not ((version.get("schema") or {}).get("openAPIV3Schema")):
            causes.append(
                (
                    f"spec.versions[{index}].schema.openAPIV3Schema",
                    "Required value: schemas are required",
                )
            )
    if causes:
        raise _invalid(name, causes)


def served_versions(crd: dict[str, Any]) -> list[ServedVersion]:
    """Every served version of ``crd`` (checked with ``check_crd`` first)."""
    spec = crd["spec"]
    names = spec["names"]
    served = []
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        openapi = version["schema"]["openAPIV3Schema"]
        rtype = ResourceType(
            group=spec["group"],
            version=version["name"],
            plural=names["plural"],
            kind=names["kind"],
            namespaced=spec["scope"] == "Namespaced",
            status_subresource="status" in (version.get("subresources") or {}),
            custom=True,
            singular=names.get("singular") or names["kind"].lower(),
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
        )
        schema = CrdSchema(kind=names["kind"], group=spec["group"], schema=openapi)
        served.append(ServedVersion(rtype=rtype, schema=schema, openapi=openapi))
    return served


def established_status(crd: dict[str, Any], *, now: str) -> dict[str, Any]:
    """The status the API server gives an accepted CRD: names accepted, established."""
    spec = crd["spec"]
    conditions = [
        {
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
        }
        for kind, reason, message in (
            ("NamesAccepted", "NoConflicts", "no conflicts found"),
            ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        )
    ]
    return {
        "conditions": conditions,
        "acceptedNames": dict(spec["names"]),
        "storedVersions": [v["name"] for v in spec["versions"] if v.get("storage")],
    }
