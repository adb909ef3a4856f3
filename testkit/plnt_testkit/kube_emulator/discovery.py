"""What the emulator says about itself: API discovery and the OpenAPI v3 documents.

Legacy discovery as every client reads it: ``/api`` (APIVersions), ``/api/v1`` and
``/apis/<group>/<version>`` (APIResourceList: names, singular, kind, verbs, short names,
categories, the ``status`` subresource) and ``/apis`` (APIGroupList). A client asking for
aggregated discovery (``as=APIGroupDiscoveryList``) gets the legacy documents, as
``application/json``, which kubectl and client-go take as "not supported" and read the
legacy way. OpenAPI v3: ``/openapi/v3`` lists one document per group-version with a hash
of its content; each document has the paths of every served type, with the ``PATCH``
operations' ``x-kubernetes-group-version-kind`` and the ``fieldValidation`` parameter
(kubectl looks for both before leaving field validation to the server), and the CRDs'
``openAPIV3Schema`` as component schemas. Built-in types get an open object schema.
Everything is computed from the served types; nothing here keeps state.
"""

import hashlib
import json
from collections import defaultdict
from typing import Any

from plnt_testkit.kube_emulator.crds import ServedVersion
from plnt_testkit.kube_emulator.types import ResourceType

VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
STATUS_VERBS = ["get", "patch", "update"]
_QUERY = [
    ("dryRun", "When present, modifications are not persisted (refused by the emulator)."),
    ("fieldManager", "A name associated with the actor making these changes."),
    ("fieldValidation", "Ignore, Warn or Strict: what the server does with unknown fields."),
]


def group_versions(types: tuple[ResourceType, ...]) -> dict[str, list[ResourceType]]:
    """``v1`` or ``<group>/<version>`` -> the types it serves, in serving order."""
    found: dict[str, list[ResourceType]] = defaultdict(list)
    for rtype in types:
        found[rtype.api_version].append(rtype)
    return dict(found)


def api_versions(address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def api_groups(types: tuple[ResourceType, ...]) -> dict[str, Any]:
    groups: dict[str, list[str]] = defaultdict(list)
    for rtype in types:
        if rtype.group and rtype.version not in groups[rtype.group]:
            groups[rtype.group].append(rtype.version)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": group,
                "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                "preferredVersion": {
                    "groupVersion": f"{group}/{versions[0]}",
                    "version": versions[0],
                },
            }
            for group, versions in groups.items()
        ],
    }


def api_group(types: tuple[ResourceType, ...], group: str) -> dict[str, Any] | None:
    """``/apis/<group>``: the group alone, None when nothing serves it."""
    for entry in api_groups(types)["groups"]:
        if entry["name"] == group:
            return {"kind": "APIGroup", "apiVersion": "v1", **entry}
    return None


def resource_list(types: tuple[ResourceType, ...], group_version: str) -> dict[str, Any] | None:
    """The APIResourceList of one group-version; None when nothing serves it."""
    served = group_versions(types).get(group_version)
    if not served:
        return None
    resources: list[dict[str, Any]] = []
    for rtype in served:
        entry: dict[str, Any] = {
            "name": rtype.plural,
            "singularName": rtype.singular_name,
            "namespaced": rtype.namespaced,
            "kind": rtype.kind,
            "verbs": VERBS,
            "storageVersionHash": _hash({"gv": group_version, "kind": rtype.kind})[:12],
        }
        if rtype.short_names:
            entry["shortNames"] = list(rtype.short_names)
        if rtype.categories:
            entry["categories"] = list(rtype.categories)
        resources.append(entry)
        if rtype.status_subresource:
            resources.append(
                {
                    "name": f"{rtype.plural}/status",
                    "singularName": "",
                    "namespaced": rtype.namespaced,
                    "kind": rtype.kind,
                    "verbs": STATUS_VERBS,
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def _hash(document: Any) -> str:
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest().upper()


def _definition_name(rtype: ResourceType) -> str:
    """The component name the API server gives a kind, e.g. ``work.plnt.v1.WorkflowRun``."""
    if not rtype.group:
        return f"io.k8s.api.core.{rtype.version}.{rtype.kind}"
    reversed_group = ".".join(reversed(rtype.group.split(".")))
    return f"{reversed_group}.{rtype.version}.{rtype.kind}"


def _operation(rtype: ResourceType, action: str, ref: str, *, body: bool) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": f"{action}{rtype.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": rtype.group,
            "version": rtype.version,
            "kind": rtype.kind,
        },
        "responses": {
            "200": {
                "description": "OK",
                "content": {"application/json": {"schema": {"$ref": ref}}},
            },
            "401": {"description": "Unauthorized"},
        },
    }
    if body:
        operation["requestBody"] = {
            "content": {"application/json": {"schema": {"$ref": ref}}},
            "required": True,
        }
    if body and action == "patch":
        operation["requestBody"] = {
            "content": {
                media: {"schema": {"type": "object"}}
                for media in (
                    "application/json-patch+json",
                    "application/merge-patch+json",
                    "application/strategic-merge-patch+json",
                )
            },
            "required": True,
        }
    if action in ("post", "put", "patch"):
        operation["parameters"] = [_query(name, text) for name, text in _QUERY]
    return operation


def _query(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": "string", "uniqueItems": True},
    }


def _path_parameter(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _paths(rtype: ResourceType) -> dict[str, Any]:
    root = f"/api/{rtype.version}" if not rtype.group else f"/apis/{rtype.api_version}"
    ref = f"#/components/schemas/{_definition_name(rtype)}"
    base = (
        f"{root}/namespaces/{{namespace}}/{rtype.plural}"
        if rtype.namespaced
        else (f"{root}/{rtype.plural}")
    )
    scope = [_path_parameter("namespace")] if rtype.namespaced else []
    items = {
        "get": _operation(rtype, "list", ref, body=False),
        "post": _operation(rtype, "post", ref, body=True),
        "parameters": scope,
    }
    one = {
        "get": _operation(rtype, "get", ref, body=False),
        "put": _operation(rtype, "put", ref, body=True),
        "patch": _operation(rtype, "patch", ref, body=True),
        "delete": _operation(rtype, "delete", ref, body=False),
        # kubectl looks for fieldValidation among the parameters of the path itself
        "parameters": [
            _path_parameter("name"),
            *scope,
            *(_query(name, text) for name, text in _QUERY),
        ],
    }
    paths = {base: items, f"{base}/{{name}}": one}
    if rtype.status_subresource:
        paths[f"{base}/{{name}}/status"] = {
            key: value for key, value in one.items() if key in ("get", "put", "patch", "parameters")
        }
    return paths


def _schema(rtype: ResourceType, served: ServedVersion | None) -> dict[str, Any]:
    schema: dict[str, Any] = (
        json.loads(json.dumps(served.openapi))
        if served is not None
        else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    )
    schema["x-kubernetes-group-version-kind"] = [
        {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
    ]
    return schema


def openapi_document(
    types: tuple[ResourceType, ...], group_version: str, crds: list[ServedVersion]
) -> dict[str, Any] | None:
    """The OpenAPI v3 document of one group-version; None when nothing serves it."""
    served = group_versions(types).get(group_version)
    if not served:
        return None
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for rtype in served:
        paths.update(_paths(rtype))
        crd = next((c for c in crds if c.rtype == rtype), None)
        schemas[_definition_name(rtype)] = _schema(rtype, crd)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.37.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def openapi_root(types: tuple[ResourceType, ...], crds: list[ServedVersion]) -> dict[str, Any]:
    """``/openapi/v3``: where each group-version's document is, with its content hash."""
    paths = {}
    for group_version in group_versions(types):
        prefix = "api" if "/" not in group_version else "apis"
        document = openapi_document(types, group_version, crds)
        digest = _hash(document)[:128]
        paths[f"{prefix}/{group_version}"] = {
            "serverRelativeURL": f"/openapi/v3/{prefix}/{group_version}?hash={digest}"
        }
    return {"paths": paths}
