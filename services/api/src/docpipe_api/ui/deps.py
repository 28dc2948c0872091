"""What the pages receive beyond the API's own dependencies: the signed-in caller (from the
session, see docpipe_api.ui.session) and the form that CsrfMiddleware checked and parsed."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from docpipe_api.resources import Caller

__all__ = ["Form", "FormDep", "UiCallerDep"]


async def _caller(request: Request) -> Caller:
    tenant, key_id = request.state.tenant, request.state.api_key_id
    assert isinstance(tenant, str), "SessionMiddleware did not run"
    return Caller(tenant, key_id)


class Form:
    """A submitted form's fields, in the order sent."""

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        self.fields = fields

    def get(self, name: str, default: str = "") -> str:
        return next((value for key, value in self.fields if key == name), default)


async def _form(request: Request) -> Form:
    return Form(list(getattr(request.state, "form", [])))


UiCallerDep = Annotated[Caller, Depends(_caller)]
FormDep = Annotated[Form, Depends(_form)]
