"""The CRD schemas and the pydantic models in plnt_common.resources describe the same
fields: walk ``model_json_schema(by_alias=True)`` and the CRD's openAPIV3Schema side by
side, both ways, comparing names, types, enums, required fields, numeric bounds, patterns
and (under spec) defaults. Adding a field to one without the other fails here."""

from collections.abc import Mapping
from typing import Any

import pytest
from plnt_chart_kit import crd_schema
from pydantic import BaseModel

from plnt_common.resources import PlntBackend, WorkflowRun

MODELS: dict[str, type[BaseModel]] = {"WorkflowRun": WorkflowRun, "PlntBackend": PlntBackend}
BOUNDS = ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems")


def _resolve(defs: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    """Follow $ref and drop the `null` branch of Optional fields."""
    while True:
        if "$ref" in node:
            node = {
                **defs[node["$ref"].rsplit("/", 1)[-1]],
                **{k: v for k, v in node.items() if k != "$ref"},
            }
            continue
        if "anyOf" in node:
            branches = [b for b in node["anyOf"] if b.get("type") != "null"]
            assert len(branches) == 1, f"unexpected union {node}"
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            node = {**branches[0], **rest}
            continue
        return node


def _compare(
    defs: Mapping[str, Any],
    model: Mapping[str, Any],
    crd: Mapping[str, Any],
    path: str,
    problems: list[str],
    *,
    defaults: bool,
) -> None:
    model = _resolve(defs, model)
    mtype = model.get("type")
    if (
        mtype == "object"
        and model.get("additionalProperties") is True
        and "properties" not in model
    ):
        # dict[str, Any]: free-form JSON, kept by the API server as written.
        if not crd.get("x-kubernetes-preserve-unknown-fields"):
            problems.append(
                f"{path}: free-form in the model, not preserve-unknown-fields in the CRD"
            )
        return
    if mtype != crd.get("type"):
        problems.append(f"{path}: type {mtype!r} in the model, {crd.get('type')!r} in the CRD")
        return
    if "enum" in model and list(model["enum"]) != list(crd.get("enum", [])):
        problems.append(f"{path}: enum {model['enum']} in the model, {crd.get('enum')} in the CRD")
    for bound in BOUNDS:
        if bound in model and model[bound] != crd.get(bound):
            problems.append(
                f"{path}: {bound} {model[bound]} in the model, {crd.get(bound)} in the CRD"
            )
    if "exclusiveMinimum" in model and not (
        crd.get("minimum") == model["exclusiveMinimum"] and crd.get("exclusiveMinimum") is True
    ):
        problems.append(f"{path}: exclusiveMinimum {model['exclusiveMinimum']} not mirrored")
    if "pattern" in model and model["pattern"] != crd.get("pattern"):
        problems.append(f"{path}: pattern {model['pattern']!r} vs {crd.get('pattern')!r}")
    scalar_default = model.get("default") is not None and not isinstance(
        model["default"], (dict, list)
    )
    if defaults and scalar_default and crd.get("default") != model["default"]:
        wanted, found = model["default"], crd.get("default")
        problems.append(f"{path}: default {wanted!r} in the model, {found!r} in the CRD")
    if defaults and "default" in crd and "default" not in model and crd["default"] != {}:
        problems.append(f"{path}: the CRD defaults to {crd['default']!r}, the model has no default")

    if mtype == "object":
        mprops: Mapping[str, Any] = model.get("properties", {})
        cprops: Mapping[str, Any] = crd.get("properties", {})
        for name in sorted(set(mprops) - set(cprops)):
            problems.append(f"{path}.{name}: in the model, missing from the CRD")
        for name in sorted(set(cprops) - set(mprops)):
            problems.append(f"{path}.{name}: in the CRD, not in the model")
        if set(model.get("required", [])) != set(crd.get("required", [])):
            problems.append(
                f"{path}: required {sorted(model.get('required', []))} in the model, "
                f"{sorted(crd.get('required', []))} in the CRD"
            )
        for name in sorted(set(mprops) & set(cprops)):
            _compare(
                defs, mprops[name], cprops[name], f"{path}.{name}", problems, defaults=defaults
            )
        mextra, cextra = model.get("additionalProperties"), crd.get("additionalProperties")
        if isinstance(mextra, Mapping) != isinstance(cextra, Mapping):
            problems.append(f"{path}: a map in only one of model and CRD")
        elif isinstance(mextra, Mapping) and isinstance(cextra, Mapping):
            _compare(defs, mextra, cextra, f"{path}.*", problems, defaults=defaults)
    elif mtype == "array":
        _compare(defs, model["items"], crd["items"], f"{path}[]", problems, defaults=defaults)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_crd_schema_and_model_have_the_same_fields(kind: str) -> None:
    model_schema = MODELS[kind].model_json_schema(by_alias=True)
    defs = model_schema.get("$defs", {})
    crd = crd_schema(kind)
    problems: list[str] = []
    assert set(model_schema["properties"]) == set(crd["properties"])
    for section in ("spec", "status"):
        if section in model_schema["properties"]:
            _compare(
                defs,
                model_schema["properties"][section],
                crd["properties"][section],
                section,
                problems,
                defaults=section == "spec",
            )
    assert problems == []


def test_the_walk_notices_a_field_missing_from_the_crd() -> None:
    model_schema = WorkflowRun.model_json_schema(by_alias=True)
    crd = crd_schema("WorkflowRun")
    del crd["properties"]["spec"]["properties"]["canary"]["properties"]["trafficPercent"]
    crd["properties"]["status"]["properties"]["smoke"]["properties"]["p99Ms"] = {"type": "number"}
    crd["properties"]["spec"]["properties"]["backend"]["properties"]["gpuCount"]["maximum"] = 8
    problems: list[str] = []
    for section in ("spec", "status"):
        _compare(
            model_schema["$defs"],
            model_schema["properties"][section],
            crd["properties"][section],
            section,
            problems,
            defaults=section == "spec",
        )
    assert "spec.canary.trafficPercent: in the model, missing from the CRD" in problems
    assert "status.smoke.p99Ms: in the CRD, not in the model" in problems
    assert "spec.backend.gpuCount: maximum 16 in the model, 8 in the CRD" in problems
