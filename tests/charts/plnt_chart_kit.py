"""Helpers of the chart and CRD tests: render charts with real Helm, validate manifests,
apply CRD defaults, run CRD schemas and their CEL rules, map env vars onto settings.

Nothing here talks to a cluster or the network: Helm renders in-process through
helm-python-sdk, manifests are checked with kubernetes-validate's bundled OpenAPI
schemas, CEL rules run in cel-python.
"""

import copy
import functools
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import celpy
import helm_python
import jsonschema
import kubernetes_validate
import yaml
from kubernetes_validate import utils as kv_utils
from pydantic import AliasChoices
from pydantic_settings import BaseSettings

REPO = Path(__file__).resolve().parents[2]
PLNT_CHART = REPO / "charts" / "plnt"
CRDS_DIR = REPO / "crds"  # the one copy: `kubectl apply -f crds/`, never Helm
RUNNER_CHART = REPO / "charts" / "plnt-runner"
SCHEMAS_DIR = Path(__file__).resolve().parent / "schemas"

# The newest Kubernetes version kubernetes-validate ships schemas for (1.37 at writing).
K8S_VERSION = kv_utils.latest_version()

CRD_FILES = {
    "WorkflowRun": CRDS_DIR / "workflowruns.plnt.work.yaml",
    "PlntBackend": CRDS_DIR / "plntbackends.plnt.work.yaml",
}


# ---- Helm ------------------------------------------------------------------------------


@functools.cache
def load_chart(path: Path) -> helm_python.Chart:
    return helm_python.Chart.load(path)


def render_files(
    chart: Path,
    values: Mapping[str, Any] | None = None,
    *,
    release: str = "plnt",
    namespace: str = "plnt-system",
    is_install: bool = True,
) -> dict[str, str]:
    """Template path -> rendered text, as `helm template` would produce it; with
    ``is_install=False`` as `helm upgrade` would."""
    return load_chart(chart).render(
        dict(values) if values is not None else None,
        name=release,
        namespace=namespace,
        is_install=is_install,
        is_upgrade=not is_install,
    )


def render(
    chart: Path,
    values: Mapping[str, Any] | None = None,
    *,
    release: str = "plnt",
    namespace: str = "plnt-system",
    is_install: bool = True,
) -> list[dict[str, Any]]:
    """Every manifest the chart renders, parsed; NOTES.txt is left out."""
    files = render_files(chart, values, release=release, namespace=namespace, is_install=is_install)
    docs: list[dict[str, Any]] = []
    for template, text in sorted(files.items()):
        if template.endswith("NOTES.txt"):
            continue
        docs.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return docs


def select(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        doc
        for doc in docs
        if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)
    ]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = select(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def container_env(deployment: dict[str, Any], container: int = 0) -> dict[str, Any]:
    """name -> value (or the valueFrom mapping) of a Deployment container's env."""
    env = deployment["spec"]["template"]["spec"]["containers"][container].get("env", [])
    names = [entry["name"] for entry in env]
    assert len(names) == len(set(names)), f"duplicate env names: {names}"
    return {entry["name"]: entry.get("value", entry.get("valueFrom")) for entry in env}


# ---- manifest validation ---------------------------------------------------------------


TRANSCRIBED_SCHEMAS = {
    "keda.sh/": "scaledobject-keda-v1alpha1.json",
    "multicluster.x-k8s.io/": "serviceexport-mcs-v1alpha1.json",
}
"""API groups kubernetes-validate has no schema for: their CRDs' schemas, transcribed."""


@functools.cache
def _transcribed_validator(file: str) -> jsonschema.Draft4Validator:
    return jsonschema.Draft4Validator(json.loads((SCHEMAS_DIR / file).read_text()))


def validate_manifest(doc: dict[str, Any]) -> None:
    """Raise unless ``doc`` is valid for Kubernetes ``K8S_VERSION`` (strict: unknown fields
    fail). KEDA ScaledObjects and MCS ServiceExports, which kubernetes-validate has no
    schema for, are checked against the schemas transcribed from their CRDs."""
    for group, file in TRANSCRIBED_SCHEMAS.items():
        if doc.get("apiVersion", "").startswith(group):
            _transcribed_validator(file).validate(doc)
            return
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


# ---- CRDs ------------------------------------------------------------------------------


@functools.cache
def _crd_text(kind: str) -> str:
    return CRD_FILES[kind].read_text()


def load_crd(kind: str) -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load(_crd_text(kind)))


def crd_schema(kind: str) -> dict[str, Any]:
    (version,) = load_crd(kind)["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def apply_defaults(schema: Mapping[str, Any], value: Any) -> Any:
    """Structural defaulting as the API server does it: a missing property with a default
    gets it (then its own properties are defaulted in turn); nulls are pruned first."""
    if isinstance(value, dict) and schema.get("type") == "object":
        props: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        out = {key: item for key, item in value.items() if item is not None}
        for key, sub in props.items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
        for key, item in out.items():
            if key in props:
                out[key] = apply_defaults(props[key], item)
            elif isinstance(extra, Mapping):
                out[key] = apply_defaults(extra, item)
        return out
    if isinstance(value, list) and schema.get("type") == "array":
        return [apply_defaults(schema.get("items", {}), item) for item in value]
    return value


def schema_errors(schema: Mapping[str, Any], value: Any) -> list[str]:
    """OpenAPI v3.0 keyword checks (Draft 4 semantics: boolean exclusiveMinimum)."""
    validator = jsonschema.Draft4Validator(schema)
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in validator.iter_errors(value)
    ]


def walk_schema(
    schema: Mapping[str, Any], path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Mapping[str, Any]]]:
    """Every schema node with its path; map values are ``*``, list items ``[]``."""
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from walk_schema(sub, (*path, key))
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        yield from walk_schema(extra, (*path, "*"))
    if "items" in schema:
        yield from walk_schema(schema["items"], (*path, "[]"))


def cel_rules(schema: Mapping[str, Any]) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    return [
        (path, rule)
        for path, node in walk_schema(schema)
        for rule in node.get("x-kubernetes-validations", [])
    ]


@functools.cache
def compile_cel(rule: str) -> celpy.Runner:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def eval_cel(rule: str, value: Any) -> bool | Exception:
    """The rule's verdict on ``self = value``; an evaluation error is returned, not raised."""
    try:
        result = compile_cel(rule).evaluate({"self": celpy.json_to_cel(value)})
    except celpy.CELEvalError as exc:
        return exc
    if isinstance(result, celpy.CELEvalError):
        return result
    return bool(result)


def cel_violations(schema: Mapping[str, Any], value: Any) -> list[str]:
    """Messages of the CEL rules ``value`` breaks; rules run where their node is present."""
    found: list[str] = []

    def visit(node: Mapping[str, Any], item: Any, path: str) -> None:
        for rule in node.get("x-kubernetes-validations", []):
            verdict = eval_cel(rule["rule"], item)
            if verdict is not True:
                found.append(f"{path or '<root>'}: {rule.get('message', rule['rule'])}")
        if isinstance(item, dict):
            props = node.get("properties", {})
            extra = node.get("additionalProperties")
            for key, sub in item.items():
                if key in props:
                    visit(props[key], sub, f"{path}.{key}" if path else key)
                elif isinstance(extra, Mapping):
                    visit(extra, sub, f"{path}.{key}" if path else key)
        elif isinstance(item, list) and "items" in node:
            for index, sub in enumerate(item):
                visit(node["items"], sub, f"{path}[{index}]")

    visit(schema, value, "")
    return found


def duplicate_map_keys(schema: Mapping[str, Any], value: Any, path: str = "") -> list[str]:
    """Entries of ``x-kubernetes-list-type: map`` lists that repeat their keys, which the
    API server refuses as duplicates."""
    found: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key, item in value.items():
            if key in props:
                found += duplicate_map_keys(props[key], item, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and "items" in schema:
        if schema.get("x-kubernetes-list-type") == "map":
            keys = schema["x-kubernetes-list-map-keys"]
            seen = [tuple(item.get(key) for key in keys) for item in value]
            found += [f"{path}[{i}]: Duplicate value" for i, k in enumerate(seen) if k in seen[:i]]
        for index, item in enumerate(value):
            found += duplicate_map_keys(schema["items"], item, f"{path}[{index}]")
    return found


def admission_errors(kind: str, obj: Mapping[str, Any]) -> list[str]:
    """What the API server would say about creating ``obj`` with our CRD: defaulting,
    then the OpenAPI schema and list-map keys, then the CEL rules. Empty means admitted."""
    schema = crd_schema(kind)
    defaulted = apply_defaults(schema, copy.deepcopy(dict(obj)))
    errors = schema_errors(schema, defaulted) + duplicate_map_keys(schema, defaulted)
    return errors or cel_violations(schema, defaulted)


# ---- settings ----------------------------------------------------------------------------


def settings_env_names(settings_class: type[BaseSettings]) -> dict[str, str]:
    """Environment variable -> field name, for every field of a pydantic-settings class."""
    prefix = settings_class.model_config.get("env_prefix", "")
    names: dict[str, str] = {}
    for field_name, field in settings_class.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            for choice in alias.choices:
                if isinstance(choice, str) and choice.isupper():
                    names[choice] = field_name
        else:
            names[f"{prefix}{field_name}".upper()] = field_name
    return names


# ---- production values, selectors, Gateway API ---------------------------------------------

# The least a plnt install needs with the chart's defaults: router.auth is keys, and the
# chart refuses to render keys without the Secret holding them.
ROUTER_KEYS: dict[str, Any] = {"router": {"apiKeysSecret": {"name": "router-api-keys"}}}


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` merged in as Helm merges values (maps recursively)."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def with_router_keys(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``values`` plus a router keys Secret (values that name their own win)."""
    return deep_merge(ROUTER_KEYS, values or {})


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a Kubernetes label selector (matchLabels, matchExpressions) selects
    ``labels``, as the API server evaluates it: an empty selector selects everything."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        verdict = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[operator]
        if not verdict:
            return False
    return True


def peer_selects(
    peer: Mapping[str, Any],
    pod_labels: Mapping[str, str],
    pod_namespace: str,
    policy_namespace: str,
    namespace_labels: Mapping[str, str] | None = None,
) -> bool:
    """Whether a NetworkPolicy peer (podSelector and/or namespaceSelector; ipBlock never
    selects pods) selects a pod of ``pod_namespace``. Namespaces carry the label
    kubernetes.io/metadata.name as the API server sets it."""
    if "ipBlock" in peer:
        return False
    ns_labels = {"kubernetes.io/metadata.name": pod_namespace, **(namespace_labels or {})}
    if "namespaceSelector" in peer:
        if not selector_matches(peer["namespaceSelector"], ns_labels):
            return False
    elif pod_namespace != policy_namespace:
        return False
    return selector_matches(peer.get("podSelector"), pod_labels)


def validate_httproute(doc: dict[str, Any]) -> None:
    """Raise unless ``doc`` is an HTTPRoute as gateway.networking.k8s.io/v1 defines the
    fields the plnt chart writes (kubernetes-validate has no Gateway API schemas)."""
    jsonschema.Draft7Validator(
        json.loads((SCHEMAS_DIR / "httproute-gateway-v1.json").read_text())
    ).validate(doc)


def validate_any(doc: dict[str, Any]) -> None:
    """``validate_manifest``, and Gateway API HTTPRoutes against their schema."""
    if doc.get("apiVersion", "").startswith("gateway.networking.k8s.io/"):
        validate_httproute(doc)
        return
    validate_manifest(doc)
