"""The settings reference: every ``DOCPIPE_*`` variable of ``docpipe.settings.Settings``
with its default, its bounds and what it does (the field's ``description``)."""

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

from docpipe.settings import Settings
from docpipe_dev.reference.markdown import cell, code, table

__all__ = ["page", "undocumented"]

_BOUNDS = ((annotated_types.Gt, "gt", "> {}"), (annotated_types.Ge, "ge", "≥ {}"),
           (annotated_types.Lt, "lt", "< {}"), (annotated_types.Le, "le", "≤ {}"))  # fmt: skip


def variable(name: str) -> str:
    return f"DOCPIPE_{name.upper()}"


def undocumented() -> list[str]:
    return [
        f"setting {variable(name)} has no description: add Field(description=...) to "
        f"`{name}` in libs/common/src/docpipe/settings.py"
        for name, field in Settings.model_fields.items()
        if not (field.description or "").strip()
    ]


def page() -> str:
    rows = [
        [code(variable(name)), default(field), bounds(field), cell(field.description or "")]
        for name, field in Settings.model_fields.items()
    ]
    return table(["variable", "default", "type and bounds", "what it does"], rows)


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
        plain = {k: v.model_dump(mode="json") if isinstance(v, BaseModel) else v
                 for k, v in value.items()}  # fmt: skip
        return code(json.dumps(plain, default=str))
    if isinstance(value, float | Decimal | int):
        return code(f"{value:g}" if isinstance(value, float) else value)
    return code(value)


def bounds(field: FieldInfo) -> str:
    parts = [type_name(field.annotation)]
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
        return "comma-separated list" if _comma_separated(annotation) else "JSON list"
    if origin is dict:
        return "JSON object"
    names = {bool: "boolean", int: "integer", float: "number", Decimal: "decimal", str: "text",
             Path: "path", SecretStr: "secret text"}  # fmt: skip
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _comma_separated(annotation: Any) -> bool:
    inner = typing.get_args(annotation)
    return bool(inner) and inner[0] is str
