"""The actions both doors call (docpipe_api.actions) take keyword arguments only, starting
with the process' resources and the caller: a page cannot pass one value where another goes
(the run page once passed the chosen step where the API key id goes)."""

from __future__ import annotations

import inspect

from docpipe_api import actions


def test_every_action_takes_keyword_arguments_only_and_is_given_resources_and_caller() -> None:
    assert actions.__all__, "the actions module exports its actions"
    for name in actions.__all__:
        parameters = list(inspect.signature(getattr(actions, name)).parameters.values())
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters), name
        assert [p.name for p in parameters[:2]] == ["resources", "caller"], name
