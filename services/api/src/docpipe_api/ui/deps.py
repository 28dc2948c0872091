"""What the pages receive beyond the API's own dependencies: the signed-in tenant and the
form that CsrfMiddleware checked and parsed."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

__all__ = ["Form", "FormDep", "UiTenantDep"]


def _tenant(request: Request) -> str:
    tenant = request.state.tenant
    assert isinstance(tenant, str), "SessionMiddleware did not run"
    return tenant


class Form:
    """A submitted form's fields, in the order sent."""

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        self.fields = fields

    def get(self, name: str, default: str = "") -> str:
        return next((value for key, value in self.fields if key == name), default)


def _form(request: Request) -> Form:
    return Form(list(getattr(request.state, "form", [])))


UiTenantDep = Annotated[str, Depends(_tenant)]
FormDep = Annotated[Form, Depends(_form)]
