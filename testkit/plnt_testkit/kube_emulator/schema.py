"""Admission of custom resources against their CRD's structural schema.

Pure: given the ``openAPIV3Schema`` of one served version, ``CrdSchema.admit`` prunes,
defaults and validates an object the way ``k8s.io/apiextensions-apiserver`` does, and
answers with the API server's messages:

- pruning drops fields the schema does not declare (``x-kubernetes-preserve-unknown-fields``
  and ``additionalProperties`` keep them; ``apiVersion``, ``kind`` and the ``metadata`` of
  the object and of ``x-kubernetes-embedded-resource`` values are kept, metadata losing
  only fields ``ObjectMeta`` does not have); the field validation mode decides whether a
  dropped field is a 400 (Strict), a warning (Warn) or silent (Ignore);
- defaulting fills ``default`` values of absent (or null, non-nullable) fields of every
  object present, nested defaults included, then drops non-nullable nulls;
- validation of the OpenAPI keywords, then the ``x-kubernetes-validations`` CEL rules
  (``cel-python``), skipped with the server's notice when a blocking error was found.

Not here: storage, conversion between versions, ``ObjectMeta`` validation (the store's),
validation ratcheting of unchanged invalid values (Kubernetes 1.30+), CEL cost budgets,
``optionalOldSelf``, and the Kubernetes CEL libraries beyond what ``cel-python`` has.
"""

import base64
import copy
import functools
import ipaddress
import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError

from plnt_testkit.kube_emulator.types import ApiError

FieldValidation = Literal["Strict", "Warn", "Ignore"]

Schema = dict[str, Any]
_ROOT = "<nil>"
"""How the API server names the object's root in a cause: a nil ``field.Path``."""
_OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
_TYPE_META = ("apiVersion", "kind")
_BLOCKING = frozenset(
    {
        "FieldValueNotSupported",
        "FieldValueRequired",
        "FieldValueTooLong",
        "FieldValueTooMany",
        "FieldValueTypeInvalid",
    }
)
"""Errors after which the server does not evaluate CEL rules (``hasBlockingErr``)."""
_NOT_CHECKED = (
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation"
)
_OLD_SELF = re.compile(r"\boldSelf\b")


@dataclass(frozen=True)
class _Cause:
    """One ``field.Error``: ``reason`` is its ``metav1.CauseType``, ``body`` its ErrorBody."""

    reason: str
    field: str
    body: str

    def text(self) -> str:
        return f"{self.field}: {self.body}"

    def status_cause(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.body, "field": self.field}


class CrdSchema:
    """The structural schema of one served version of a CRD (its ``openAPIV3Schema``)."""

    def __init__(self, *, kind: str, group: str, schema: dict[str, Any]) -> None:
        """Compiles every CEL rule once; a rule that does not compile raises
        ``celpy.CELParseError`` here, as the server refuses such a CRD."""
        self.kind = kind
        self.group = group
        self.schema = schema
        self._programs: dict[str, celpy.Runner] = {}
        for node in _nodes(schema):
            for rule in node.get("x-kubernetes-validations") or ():
                self._program(rule["rule"])
                if rule.get("messageExpression"):
                    self._program(rule["messageExpression"])

    def admit(
        self,
        obj: dict[str, Any],
        *,
        old: dict[str, Any] | None,
        field_validation: FieldValidation,
        subresource: Literal["status"] | None = None,
    ) -> tuple[dict[str, Any], list[str]]:
        """Prune, default and validate ``obj`` (a full object with apiVersion, kind,
        metadata, spec, status) as the API server does on create (``old`` None) and
        update; returns the object to store and the warnings to send in ``Warning``
        headers. ``obj`` is not changed.

        Raises ApiError: 422 Invalid (``details.causes`` filled) when a value breaks the
        schema or a CEL rule; with ``field_validation`` Strict, unknown fields are a 400
        BadRequest naming them (``strict decoding error: unknown field "spec.foo"``);
        Warn prunes them with a warning ``unknown field "spec.foo"``; Ignore prunes them.
        With ``subresource`` "status" only ``status`` is pruned, defaulted and validated.
        """
        new = copy.deepcopy(obj)
        if subresource == "status":
            node: Schema = (self.schema.get("properties") or {}).get("status") or {}
            if "status" not in new:
                return new, []
            path, value, old_value = "status", new["status"], (old or {}).get("status")
            root = False
        else:
            node, path, value, old_value, root = self.schema, "", new, old, True
        pruned: list[str] = []
        _prune(value, node, path, pruned, root=root)
        if pruned and field_validation == "Strict":
            unknown = ", ".join(f'unknown field "{p}"' for p in pruned)
            raise ApiError(400, "BadRequest", f"strict decoding error: {unknown}")
        warnings = [f'unknown field "{p}"' for p in pruned] if field_validation == "Warn" else []
        if subresource == "status" and value is None and not node.get("nullable"):
            del new["status"]
            return new, warnings
        _default(value, node, root=root)
        causes: list[_Cause] = []
        _validate(value, node, path, causes, root=root)
        if any(c.reason in _BLOCKING for c in causes):
            causes.append(
                _Cause("FieldValueInvalid", _ROOT, f'Invalid value: "null": {_NOT_CHECKED}')
            )
        else:
            self._check_rules(value, old_value, node, path, causes, root=root)
        if causes:
            raise self._invalid(new, causes)
        return new, warnings

    def _invalid(self, obj: dict[str, Any], causes: list[_Cause]) -> ApiError:
        name = (obj.get("metadata") or {}).get("name") or ""
        texts = list(dict.fromkeys(c.text() for c in causes))
        why = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
        return ApiError(
            422,
            "Invalid",
            f'{self.kind}.{self.group} "{name}" is invalid: {why}',
            details={
                "name": name,
                "group": self.group,
                "kind": self.kind,
                "causes": [c.status_cause() for c in causes],
            },
        )

    def _program(self, expression: str) -> celpy.Runner:
        program = self._programs.get(expression)
        if program is None:
            program = self._programs[expression] = _compile(expression)
        return program

    def _check_rules(
        self,
        value: Any,
        old: Any,
        node: Schema,
        path: str,
        causes: list[_Cause],
        *,
        root: bool = False,
    ) -> None:
        """Evaluate the CEL rules of ``node`` on ``value``, then of its children."""
        if value is None:
            return
        rules = node.get("x-kubernetes-validations") or ()
        if rules:
            this = _to_cel(value, node, root=root)
            before = None if old is None else _to_cel(old, node, root=root)
            for rule in rules:
                cause = self._check_rule(rule, this, before, value, node, path)
                if cause is not None:
                    causes.append(cause)
        for child, child_old, child_node, child_path in _children(value, old, node, path, root):
            self._check_rules(child, child_old, child_node, child_path, causes)

    def _check_rule(
        self,
        rule: dict[str, Any],
        this: Any,
        before: Any,
        value: Any,
        node: Schema,
        path: str,
    ) -> _Cause | None:
        expression: str = rule["rule"]
        activation: dict[str, Any] = {"self": this}
        if _OLD_SELF.search(expression):
            if before is None:
                return None  # a transition rule: only on updates with a correlated old value
            activation["oldSelf"] = before
        where = path or _ROOT
        if rule.get("fieldPath"):
            where = _join_field_path(path, rule["fieldPath"])
        type_name = _schema_type_name(node, value)
        verdict = _evaluate(self._program(expression), activation)
        if isinstance(verdict, str):
            described = (rule.get("message") or expression).strip()
            return _Cause(
                "FieldValueInvalid",
                where,
                f"Invalid value: {_quote(type_name)}: {verdict} evaluating rule: {described}",
            )
        if verdict:
            return None
        message = self._message(rule, activation)
        reason = rule.get("reason") or "FieldValueInvalid"
        if reason == "FieldValueForbidden":
            return _Cause(reason, where, f"Forbidden: {message}")
        if reason == "FieldValueRequired":
            return _Cause(reason, where, f"Required value: {message}")
        if reason == "FieldValueDuplicate":
            return _Cause(reason, where, f"Duplicate value: {_quote(type_name)}")
        return _Cause("FieldValueInvalid", where, f"Invalid value: {_quote(type_name)}: {message}")

    def _message(self, rule: dict[str, Any], activation: dict[str, Any]) -> str:
        """The rule's ``messageExpression`` when it gives a one-line string, else its
        ``message``, else ``failed rule: <rule>``, as the server falls back."""
        if rule.get("messageExpression"):
            try:
                result = self._program(rule["messageExpression"]).evaluate(activation)
            except CELEvalError:
                result = None
            if isinstance(result, str) and result.strip() and "\n" not in result:
                return str(result)
        if rule.get("message"):
            return str(rule["message"])
        return f"failed rule: {rule['rule'].strip()}"


@functools.lru_cache(maxsize=512)
def _compile(expression: str) -> celpy.Runner:
    """Compiled CEL programs are stateless: one per expression text for the process."""
    env = celpy.Environment()
    return env.program(env.compile(expression))


def _evaluate(program: celpy.Runner, activation: dict[str, Any]) -> bool | str:
    """The rule's verdict, or the text of the error it failed with."""
    try:
        result = program.evaluate(activation)
    except CELEvalError as exc:
        return _cel_error_text(exc)
    if isinstance(result, CELEvalError):
        return _cel_error_text(result)
    if isinstance(result, celtypes.BoolType | bool):
        return bool(result)
    return "rule did not evaluate to a bool"


def _cel_error_text(exc: CELEvalError) -> str:
    detail = exc.args[0] if exc.args else str(exc)
    found = re.fullmatch(r"no such member in mapping: '(.*)'", str(detail))
    return f"no such key: {found.group(1)}" if found else str(detail)


# --- walking schema and values ------------------------------------------------------------


def _nodes(node: Schema) -> Iterator[Schema]:
    yield node
    for child in (node.get("properties") or {}).values():
        yield from _nodes(child)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _nodes(node[key])


def _child_schema(node: Schema, key: str) -> Schema | None:
    """The schema of ``key`` in an object of ``node``, None when it declares none."""
    props = node.get("properties") or {}
    if key in props:
        return props[key]  # type: ignore[no-any-return]
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return extra
    return None


def _keeps_object_meta(node: Schema, root: bool) -> bool:
    return root or bool(node.get("x-kubernetes-embedded-resource"))


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _children(
    value: Any, old: Any, node: Schema, path: str, root: bool
) -> Iterator[tuple[Any, Any, Schema, str]]:
    """Each child value with its correlated old value (None when there is none), the
    schema it has and its path; objects correlate by key, lists of type map by their
    keys and lists of type set by value, other lists not at all (as the server does)."""
    if isinstance(value, dict):
        skip = _keeps_object_meta(node, root)
        for key, child in value.items():
            if skip and key in (*_TYPE_META, "metadata"):
                continue
            sub = _child_schema(node, key)
            if sub is not None:
                old_child = old.get(key) if isinstance(old, dict) else None
                yield child, old_child, sub, _child(path, key)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        items: Schema = node["items"]
        list_type = node.get("x-kubernetes-list-type")
        olds = old if isinstance(old, list) else []
        for index, child in enumerate(value):
            old_child = None
            if list_type == "map":
                keys = node.get("x-kubernetes-list-map-keys") or []
                old_child = next(
                    (o for o in olds if _map_key(o, keys) == _map_key(child, keys)), None
                )
            elif list_type == "set":
                old_child = child if child in olds else None
            yield child, old_child, items, f"{path}[{index}]"


def _map_key(item: Any, keys: list[str]) -> tuple[str, ...] | None:
    if not isinstance(item, dict):
        return None
    return tuple(json.dumps(item.get(k), sort_keys=True) for k in keys)


# --- pruning and defaulting ---------------------------------------------------------------


def _prune(value: Any, node: Schema, path: str, pruned: list[str], *, root: bool = False) -> None:
    """Drop, in place, the fields ``node`` does not declare; their paths go to ``pruned``."""
    if isinstance(value, dict):
        keep_meta = _keeps_object_meta(node, root)
        preserve = bool(node.get("x-kubernetes-preserve-unknown-fields"))
        extra = node.get("additionalProperties")
        for key in list(value):
            if keep_meta and key in _TYPE_META:
                continue
            if keep_meta and key == "metadata":
                _prune_object_meta(value[key], _child(path, key), pruned)
                continue
            sub = _child_schema(node, key)
            if sub is not None:
                _prune(value[key], sub, _child(path, key), pruned)
            elif not preserve and extra is not True:
                del value[key]
                pruned.append(_child(path, key))
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for index, item in enumerate(value):
            _prune(item, node["items"], f"{path}[{index}]", pruned)


def _prune_object_meta(meta: Any, path: str, pruned: list[str]) -> None:
    if isinstance(meta, dict):
        for key in [k for k in meta if k not in _OBJECT_META_FIELDS]:
            del meta[key]
            pruned.append(_child(path, key))


def _default(value: Any, node: Schema, *, root: bool = False) -> None:
    """Fill defaults into ``value`` in place (structural defaulting), then drop nulls of
    non-nullable fields without a default, as the server does before validating."""
    if isinstance(value, dict):
        skip = (*_TYPE_META, "metadata") if _keeps_object_meta(node, root) else ()
        for key, sub in (node.get("properties") or {}).items():
            if "default" not in sub or key in skip:
                continue
            if key not in value or (value[key] is None and not sub.get("nullable")):
                value[key] = copy.deepcopy(sub["default"])
        for key in list(value):
            if key in skip:
                continue
            sub = _child_schema(node, key)
            if sub is None:
                continue
            if value[key] is None and not sub.get("nullable") and "default" not in sub:
                del value[key]
            else:
                _default(value[key], sub)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for item in value:
            _default(item, node["items"])


# --- OpenAPI validation -------------------------------------------------------------------


def _validate(
    value: Any, node: Schema, path: str, causes: list[_Cause], *, root: bool = False
) -> None:
    """Append a cause for each OpenAPI keyword of ``node`` (and its children) ``value``
    breaks, worded as kube-openapi's validator and ``ValidateCustomResource`` word them."""
    if value is None and node.get("nullable"):
        return
    if not _type_ok(value, node, path, causes):
        return
    if "enum" in node and not any(_same_json(value, allowed) for allowed in node["enum"]):
        supported = ", ".join(_quote(a if isinstance(a, str) else _json(a)) for a in node["enum"])
        causes.append(
            _Cause(
                "FieldValueNotSupported",
                path,
                f"Unsupported value: {_go_value(value)}: supported values: {supported}",
            )
        )
    if isinstance(value, str):
        _validate_string(value, node, path, causes)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _validate_number(value, node, path, causes)
    elif isinstance(value, list):
        _validate_array(value, node, path, causes)
    elif isinstance(value, dict):
        _validate_object(value, node, path, causes, root=root)


def _type_ok(value: Any, node: Schema, path: str, causes: list[_Cause]) -> bool:
    actual = _json_type(value)
    if node.get("x-kubernetes-int-or-string"):
        wanted = "integer,string"
        ok = actual in ("integer", "string")
    else:
        wanted = node.get("type") or ""
        ok = not wanted or actual == wanted
        if wanted == "number" and actual == "integer":
            ok = True
        if wanted == "integer" and isinstance(value, float) and value.is_integer():
            ok = True
    if not ok:
        causes.append(
            _Cause(
                "FieldValueTypeInvalid",
                path,
                f"Invalid value: {_quote(actual)}: "
                f"{path} in body must be of type {wanted}: {_quote(actual)}",
            )
        )
    return ok


def _invalid(path: str, value: Any, detail: str) -> _Cause:
    return _Cause("FieldValueInvalid", path, f"Invalid value: {_go_value(value)}: {detail}")


def _validate_string(value: str, node: Schema, path: str, causes: list[_Cause]) -> None:
    if "maxLength" in node and len(value) > node["maxLength"]:
        causes.append(
            _Cause(
                "FieldValueTooLong",
                path,
                f"Too long: may not be more than {node['maxLength']} bytes",
            )
        )
    if "minLength" in node and len(value) < node["minLength"]:
        detail = f"{path} in body should be at least {node['minLength']} chars long"
        causes.append(_invalid(path, value, detail))
    if "pattern" in node and not _regex(node["pattern"]).search(value):
        causes.append(_invalid(path, value, f"{path} in body should match '{node['pattern']}'"))
    checker = _FORMATS.get(node.get("format") or "")
    if checker is not None and not checker(value):
        detail = f"{path} in body must be of type {node['format']}: {_quote(value)}"
        causes.append(_invalid(path, value, detail))


def _validate_number(value: int | float, node: Schema, path: str, causes: list[_Cause]) -> None:
    if "maximum" in node:
        bound = node["maximum"]
        exclusive = bool(node.get("exclusiveMaximum"))
        if value > bound or (exclusive and value == bound):
            relation = "less than" if exclusive else "less than or equal to"
            detail = f"{path} in body should be {relation} {_go_bound(bound, value)}"
            causes.append(_invalid(path, value, detail))
    if "minimum" in node:
        bound = node["minimum"]
        exclusive = bool(node.get("exclusiveMinimum"))
        if value < bound or (exclusive and value == bound):
            relation = "greater than" if exclusive else "greater than or equal to"
            detail = f"{path} in body should be {relation} {_go_bound(bound, value)}"
            causes.append(_invalid(path, value, detail))
    if node.get("multipleOf"):
        factor = node["multipleOf"]
        if Decimal(str(value)) % Decimal(str(factor)) != 0:
            detail = f"{path} in body should be a multiple of {_go_bound(factor, value)}"
            causes.append(_invalid(path, value, detail))


def _validate_array(value: list[Any], node: Schema, path: str, causes: list[_Cause]) -> None:
    if "maxItems" in node and len(value) > node["maxItems"]:
        body = f"Too many: {len(value)}: must have at most {node['maxItems']} items"
        causes.append(_Cause("FieldValueTooMany", path, body))
    if "minItems" in node and len(value) < node["minItems"]:
        detail = f"{path} in body should have at least {node['minItems']} items"
        causes.append(_invalid(path, value, detail))
    items = node.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(value):
            _validate(item, items, f"{path}[{index}]", causes)
    list_type = node.get("x-kubernetes-list-type")
    if list_type in ("set", "map"):
        keys = node.get("x-kubernetes-list-map-keys") or []
        seen: set[str] = set()
        for index, item in enumerate(value):
            if list_type == "map":
                if not isinstance(item, dict):
                    continue
                identity = _json({k: item.get(k) for k in keys})
            else:
                identity = _json(item)
            if identity in seen:
                shown = {k: item[k] for k in keys if k in item} if list_type == "map" else item
                causes.append(
                    _Cause(
                        "FieldValueDuplicate",
                        f"{path}[{index}]",
                        f"Duplicate value: {_go_value(shown)}",
                    )
                )
            seen.add(identity)


def _validate_object(
    value: dict[str, Any], node: Schema, path: str, causes: list[_Cause], *, root: bool
) -> None:
    if "maxProperties" in node and len(value) > node["maxProperties"]:
        body = f"Too many: {len(value)}: must have at most {node['maxProperties']} items"
        causes.append(_Cause("FieldValueTooMany", path, body))
    if "minProperties" in node and len(value) < node["minProperties"]:
        detail = f"{path} in body should have at least {node['minProperties']} properties"
        causes.append(_invalid(path, value, detail))
    for key in node.get("required") or ():
        if key not in value:
            causes.append(_Cause("FieldValueRequired", _child(path, key), "Required value"))
    skip = ("metadata",) if _keeps_object_meta(node, root) else ()
    for key, child in value.items():
        if key in skip:
            continue
        sub = _child_schema(node, key)
        if sub is not None:
            _validate(child, sub, _child(path, key), causes)


# --- values as CEL sees them --------------------------------------------------------------


def _to_cel(value: Any, node: Schema | None, *, root: bool = False) -> Any:
    """``value`` as the CEL type its schema gives it: integers stay ints, ``number`` is a
    double, ``format: duration``/``date-time`` strings are durations/timestamps, objects are
    maps (``has()`` works), and the object's metadata shows only name and generateName."""
    node = node or {}
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int | float):
        if node.get("type") == "number" or (isinstance(value, float) and not value.is_integer()):
            return celtypes.DoubleType(float(value))
        if isinstance(value, float) and node.get("type") != "integer":
            return celtypes.DoubleType(value)
        return celtypes.IntType(int(value))
    if isinstance(value, str):
        return _cel_string(value, node.get("format"))
    if isinstance(value, list):
        items = node.get("items") if isinstance(node.get("items"), dict) else None
        return celtypes.ListType([_to_cel(item, items) for item in value])
    if isinstance(value, dict):
        fields: dict[Any, Any] = {}
        meta = _keeps_object_meta(node, root)
        for key, child in value.items():
            if meta and key == "metadata" and isinstance(child, dict):
                shown = {k: child[k] for k in ("name", "generateName") if k in child}
                fields[celtypes.StringType(key)] = _to_cel(shown, {})
            else:
                fields[celtypes.StringType(key)] = _to_cel(child, _child_schema(node, key))
        return celtypes.MapType(fields)
    raise TypeError(f"not a JSON value: {value!r}")


def _cel_string(value: str, fmt: str | None) -> Any:
    try:
        if fmt == "duration":
            return celtypes.DurationType(value)
        if fmt == "date-time":
            return celtypes.TimestampType(value)
    except (ValueError, TypeError):
        pass
    return celtypes.StringType(value)


def _schema_type_name(node: Schema, value: Any) -> str:
    """What a CEL cause shows as the value: the node's type, as ``sts.Type``."""
    if node.get("type"):
        return str(node["type"])
    return _json_type(value)


def _join_field_path(path: str, field_path: str) -> str:
    relative = field_path if field_path.startswith(("[", ".")) else f".{field_path}"
    joined = f"{path}{relative}"
    return joined[1:] if joined.startswith(".") else joined


# --- formatting as Go does ----------------------------------------------------------------


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _same_json(a: Any, b: Any) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _quote(text: str) -> str:
    """Go's ``%q`` for the strings causes hold (JSON escaping is close enough)."""
    return json.dumps(text, ensure_ascii=False)


def _go_float(number: float) -> str:
    """Go's ``%v`` of a float64: shortest digits, exponent form from 1e+06 or below 1e-04."""
    if number != number:
        return "NaN"
    if number in (float("inf"), float("-inf")):
        return "+Inf" if number > 0 else "-Inf"
    if number == 0:
        return "0"
    exact = Decimal(repr(number)).normalize()
    sign, digits, _ = exact.as_tuple()
    exponent = exact.adjusted()
    text = "".join(map(str, digits))
    if exponent < -4 or exponent >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        body = f"{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    else:
        body = format(exact, "f")
    return ("-" if sign else "") + body


def _go_value(value: Any) -> str:
    """A cause's bad value as ``field.Error`` prints it."""
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return _quote(value)
    return _json(value)


def _go_bound(bound: int | float, value: int | float) -> str:
    """A schema bound as the validator prints it: as an int64 for an integer value."""
    if isinstance(value, int):
        return str(int(bound))
    return _go_float(float(bound))


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _is_date_time(text: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)", text):
        return False
    try:
        datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _is_date(text: str) -> bool:
    try:
        datetime.strptime(text, "%Y-%m-%d")
    except ValueError:
        return False
    return True


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return bool(re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", text))


def _is_ip(version: int, text: str) -> bool:
    try:
        return ipaddress.ip_address(text).version == version
    except ValueError:
        return False


def _is_byte(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except ValueError:
        return False
    return True


_FORMATS: dict[str, Callable[[str], bool]] = {
    "date-time": _is_date_time,
    "date": _is_date,
    "uuid": _is_uuid,
    "ipv4": functools.partial(_is_ip, 4),
    "ipv6": functools.partial(_is_ip, 6),
    "byte": _is_byte,
    "duration": lambda text: bool(re.fullmatch(r"([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+", text)),
}
"""The string formats checked; others (int64, hostname, uri, ...) pass, as unknown formats
do on the server."""
