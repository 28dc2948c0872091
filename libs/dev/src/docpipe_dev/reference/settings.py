"""The settings reference: every ``DOCPIPE_*`` variable of ``docpipe.settings.Settings``
with its default, its bounds and what it does (the field's ``description``), one table per
concern (the modules of ``docpipe.settings``) under the concern's name (its class'
docstring)."""

from __future__ import annotations

import enum
import json
import types
import typing
from decimal import Decimal
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import NoDecode

from docpipe.settings import Settings
from docpipe_dev.reference.markdown import cell, code, table

__all__ = ["page", "undocumented"]

_BOUNDS = (
    (annotated_types.Gt, "gt", "> {}"),
    (annotated_types.Ge, "ge", "≥ {}"),
    (annotated_types.Lt, "lt", "< {}"),
    (annotated_types.Le, "le", "≤ {}"),
)


def variable(name: str) -> str:
    return f"DOCPIPE_{name.upper()}"


def concerns() -> list[type[BaseModel]]:
    """The concerns ``Settings`` is made of, in the order it lists them."""
    return [c for c in Settings.__mro__[1:] if c.__module__.startswith("docpipe.settings.")]


def declared(concern: type[BaseModel]) -> list[str]:
    """The settings ``concern`` declares itself (not those of the concerns it builds on)."""
    inherited = {n for b in concern.__bases__ if issubclass(b, BaseModel) for n in b.model_fields}
    return [name for name in concern.model_fields if name not in inherited]


def source_of(name: str) -> str:
    """The file that declares setting ``name``."""
    module = next(c.__module__ for c in concerns() if name in declared(c))
    return f"libs/common/src/{module.replace('.', '/')}.py"


def undocumented() -> list[str]:
    return [
        f"setting {variable(name)} has no description: add Field(description=...) to "
        f"`{name}` in {source_of(name)}"
        for name, field in Settings.model_fields.items()
        if not (field.description or "").strip()
    ]


def page() -> str:
    sections = []
    for concern in concerns():
        fields = [(name, Settings.model_fields[name]) for name in declared(concern)]
        rows = [
            [code(variable(name)), default(field), bounds(field), cell(field.description or "")]
            for name, field in fields
        ]
        title = (concern.__doc__ or concern.__name__).strip().splitlines()[0]
        headers = ["variable", "default", "type and bounds", "what it does"]
        sections.append(f"## {title}\n\n{table(headers, rows)}")
    return "\n".join(sections)


def default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    else:
        value = field.default
    if value is PydanticUndefined or value is None:
        return "unset"
    if isinstance(value, SecretStr):
        return "empty" if not value.get_secret_value() else "(secret)"
    if isinstance(value, enum.Enum):
        return code(value.value)
    if isinstance(value, bool):
        return code(str(value).lower())
    if isinstance(value, list | tuple | dict) and not value:
        return "empty"
    if isinstance(value, dict):
        plain = {
            k: v.model_dump(mode="json") if isinstance(v, BaseModel) else v
            for k, v in value.items()
        }
        return code(json.dumps(plain, default=str))
    if isinstance(value, float | Decimal | int):
        return code(f"{value:g}" if isinstance(value, float) else value)
    return code(value)


def bounds(field: FieldInfo) -> str:
    # NoDecode: the variable is not JSON but split at commas (the setting's own validator).
    comma_separated = any(item is NoDecode for item in field.metadata)
    parts = ["comma-separated list" if comma_separated else type_name(field.annotation)]
    for item in _metadata(field):
        for kind, attr, form in _BOUNDS:
            if isinstance(item, kind):
                limit = getattr(item, attr)
                parts.append(form.format(f"{limit:g}" if isinstance(limit, float) else limit))
        pattern = getattr(item, "pattern", None)
        if pattern:
            parts.append(f"matching {code(pattern)}")
    return cell(", ".join(parts))


def _metadata(field: FieldInfo) -> list[Any]:
    """The field's constraints, including those of an ``Optional[Annotated[...]]``."""
    found = list(field.metadata)
    for arg in typing.get_args(field.annotation):
        for extra in typing.get_args(arg)[1:]:
            if isinstance(extra, FieldInfo):
                found += extra.metadata
    return found


def type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(f"`{m.value}`" for m in annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        named = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" (optional)" if type(None) in args else "")
    if origin in (list, tuple):
        return "JSON list"
    if origin is dict:
        return "JSON object"
    names = {
        bool: "boolean",
        int: "integer",
        float: "number",
        Decimal: "decimal",
        str: "text",
        Path: "path",
        SecretStr: "secret text",
    }
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))
