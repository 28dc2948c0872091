"""Output schemas in the form providers' strict structured-output mode accepts, and back.

A provider in ``json_schema`` mode with ``strict: true`` (OpenAI, vLLM, llama.cpp, Ollama)
constrains the model's tokens to a schema, but only to a subset of JSON Schema: every object
lists its properties, all of them required, with ``additionalProperties: false``. The
conversion follows OpenAI's documented recipe:

- an optional property becomes required and nullable; :func:`drop_absent_optionals` turns
  the ``null`` the model then answers back into an absent property;
- keywords outside the subset that only narrow values (``minLength``, ``uniqueItems``,
  ``default``...) are left out of what is sent: docpipe validates every answer against the
  step's own schema afterwards, so they still hold;
- ``oneOf`` is sent as ``anyOf`` (the same answers, bar overlaps that validation catches);
- what the subset cannot express is refused with :class:`StrictSchemaError`: open maps
  (``additionalProperties`` as a schema), objects without properties, values of any type,
  ``allOf``/``not``/conditionals, tuples, a root that is not an object, and schemas past the
  documented size limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "StrictSchemaError",
    "drop_absent_optionals",
    "schema_name",
    "strict_schema",
]


class StrictSchemaError(ValueError):
    """The schema cannot be sent in strict mode; the message says where and why."""


# OpenAI's documented limits for strict mode.
MAX_DEPTH = 10
MAX_PROPERTIES = 5000
MAX_ENUM_VALUES = 1000
STRICT_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
# Keywords sent as they are, per type; every other keyword is left out of what is sent.
_KEPT = {
    "string": ("pattern",),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "integer": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "array": ("minItems", "maxItems"),
}
_COMMON = ("description", "enum", "const")
_REFUSED = {
    "allOf": "allOf cannot be sent in strict mode: merge its schemas into one",
    "not": "'not' cannot be sent in strict mode",
    "if": "if/then/else cannot be sent in strict mode",
    "patternProperties": "patternProperties (an open map) cannot be sent in strict mode",
    "prefixItems": "tuples (prefixItems) cannot be sent in strict mode",
    "dependentSchemas": "dependentSchemas cannot be sent in strict mode",
    "unevaluatedProperties": "unevaluatedProperties cannot be sent in strict mode",
}
_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The strict-mode form of ``schema``, or StrictSchemaError naming the place (a JSON
    pointer) that cannot be made strict. ``schema`` itself is not changed."""
    if not isinstance(schema, Mapping):
        raise StrictSchemaError("the schema must be a JSON object")
    converter = _Converter()
    root = converter.node(schema, "#", depth=1)
    if root.get("type") != "object" or "anyOf" in root:
        raise StrictSchemaError("at #: the root of a strict schema must be an object")
    definitions = schema.get("$defs", schema.get("definitions"))
    if isinstance(definitions, Mapping):
        key = "$defs" if "$defs" in schema else "definitions"
        root[key] = {
            name: converter.node(sub, f"#/{key}/{name}", depth=1)
            for name, sub in definitions.items()
        }
    if converter.properties > MAX_PROPERTIES:
        raise StrictSchemaError(
            f"the schema has {converter.properties} properties; strict mode allows {MAX_PROPERTIES}"
        )
    return root


class _Converter:
    def __init__(self) -> None:
        self.properties = 0

    def node(self, schema: Any, where: str, *, depth: int) -> dict[str, Any]:
        if not isinstance(schema, Mapping):
            raise StrictSchemaError(f"at {where}: a schema must be a JSON object")
        if depth > MAX_DEPTH:
            raise StrictSchemaError(f"at {where}: nested deeper than strict mode's {MAX_DEPTH}")
        for keyword, why in _REFUSED.items():
            if keyword in schema:
                raise StrictSchemaError(f"at {where}: {why}")
        if "$ref" in schema:
            ref = schema["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise StrictSchemaError(f"at {where}: only local $ref ('#/...') can be sent")
            return {"$ref": ref}
        branches = schema.get("anyOf", schema.get("oneOf"))
        if branches is not None:
            if not isinstance(branches, list) or not branches:
                raise StrictSchemaError(f"at {where}: anyOf/oneOf must be a non-empty list")
            converted = [
                self.node(b, f"{where}/anyOf/{i}", depth=depth) for i, b in enumerate(branches)
            ]
            return {"anyOf": converted, **_copy(schema, ("description",))}
        types = _types(schema, where)
        out: dict[str, Any] = {"type": types[0] if len(types) == 1 else types}
        out.update(_copy(schema, _COMMON))
        if isinstance(out.get("enum"), list) and len(out["enum"]) > MAX_ENUM_VALUES:
            raise StrictSchemaError(f"at {where}: enum has more than {MAX_ENUM_VALUES} values")
        for t in types:
            out.update(_copy(schema, _KEPT.get(t, ())))
        if "string" in types and schema.get("format") in STRICT_FORMATS:
            out["format"] = schema["format"]
        if "object" in types:
            out.update(self._object(schema, where, depth))
        if "array" in types:
            if not isinstance(schema.get("items"), Mapping):
                raise StrictSchemaError(f"at {where}: an array must say what its items are")
            out["items"] = self.node(schema["items"], f"{where}/items", depth=depth + 1)
        return out

    def _object(self, schema: Mapping[str, Any], where: str, depth: int) -> dict[str, Any]:
        extra = schema.get("additionalProperties", False)
        if extra is not False:
            raise StrictSchemaError(
                f"at {where}: additionalProperties must be false in strict mode (an object "
                f"with free-form keys cannot be sent; list its properties instead)"
            )
        properties = schema.get("properties")
        if not isinstance(properties, Mapping) or not properties:
            raise StrictSchemaError(
                f"at {where}: an object without properties cannot be sent in strict mode"
            )
        required = set(schema.get("required", ()))
        self.properties += len(properties)
        converted = {}
        for name, sub in properties.items():
            node = self.node(sub, f"{where}/properties/{name}", depth=depth + 1)
            converted[name] = node if name in required else _nullable(node)
        return {
            "properties": converted,
            "required": list(properties),
            "additionalProperties": False,
        }


def _types(schema: Mapping[str, Any], where: str) -> list[str]:
    declared = schema.get("type")
    if declared is None:
        if "const" in schema or "enum" in schema:
            values = [schema["const"]] if "const" in schema else list(schema["enum"])
            return sorted({_json_type(v) for v in values})
        raise StrictSchemaError(
            f"at {where}: a value of any type cannot be sent in strict mode; give it a 'type'"
        )
    types = [declared] if isinstance(declared, str) else list(declared)
    unknown = [t for t in types if t not in _TYPES]
    if not types or unknown:
        raise StrictSchemaError(f"at {where}: unknown type {unknown or declared!r}")
    return types


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _copy(schema: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: schema[k] for k in keys if k in schema}


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` that also accepts null (how strict mode spells an optional property).

    A bare type gets "null" added to its type list; anything with more to it (an object's
    properties, a pattern, an enum, a reference) becomes ``anyOf: [node, null]``, because
    some servers' grammars (llama-cpp-python's) drop the constraints of a type list."""
    if "anyOf" in node:
        if not any(b.get("type") == "null" for b in node["anyOf"]):
            node = {**node, "anyOf": [*node["anyOf"], {"type": "null"}]}
        return node
    if set(node) <= {"type", "description"} and "type" in node:
        types = node["type"] if isinstance(node["type"], list) else [node["type"]]
        return {**node, "type": types if "null" in types else [*types, "null"]}
    if node.get("type") == "null":
        return node
    return {"anyOf": [node, {"type": "null"}]}


def drop_absent_optionals(value: Any, schema: Mapping[str, Any]) -> Any:
    """``value`` (an answer to ``strict_schema(schema)``) with the nulls that stand for an
    absent optional property removed, where ``schema`` itself does not allow null there."""
    return _Restorer(schema).restore(value, schema)


class _Restorer:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return schema
        node: Any = self.root
        for part in ref[2:].split("/"):
            node = node.get(part, {}) if isinstance(node, Mapping) else {}
        return node if isinstance(node, Mapping) else {}

    def restore(self, value: Any, schema: Mapping[str, Any]) -> Any:
        schema = self.resolve(schema)
        for branch in schema.get("anyOf", schema.get("oneOf", ())):
            if isinstance(branch, Mapping):
                value = self.restore(value, branch)
        if isinstance(value, dict):
            properties = schema.get("properties")
            if not isinstance(properties, Mapping):
                return value
            required = set(schema.get("required", ()))
            out = {}
            for name, item in value.items():
                sub = properties.get(name)
                if not isinstance(sub, Mapping):
                    out[name] = item
                elif item is None and name not in required and not _allows_null(self.resolve(sub)):
                    continue
                else:
                    out[name] = self.restore(item, sub)
            return out
        if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
            return [self.restore(item, schema["items"]) for item in value]
        return value


def _allows_null(schema: Mapping[str, Any]) -> bool:
    declared = schema.get("type")
    if declared == "null" or (isinstance(declared, list) and "null" in declared):
        return True
    if "const" in schema and schema["const"] is None:
        return True
    if None in schema.get("enum", ()):
        return True
    return any(
        isinstance(b, Mapping) and _allows_null(b)
        for b in schema.get("anyOf", schema.get("oneOf", ()))
    )


def schema_name(step: str) -> str:
    """A name strict mode accepts for a step's schema (letters, digits, '_' and '-', <= 64)."""
    cleaned = "".join(c if c.isalnum() or c in "_-" else "_" for c in step)[:64]
    return cleaned or "answer"
