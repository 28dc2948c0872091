"""The provider side, one module per concern:

- :mod:`.calls`: the memoised calls a step makes, recorded before they are sent, round by
  round; :mod:`.call_threads`: the threads a round's calls run in, shared by every step of
  the process; :mod:`.completions`: their answers on record as they arrive, grouped when
  together;
- :mod:`.routing`: which model answers a call, and the request sent to it with its estimates;
- :mod:`.limiter`: the call gate, and the limit shared by every worker that plugs into it
  (its Lua scripts in :mod:`.limiter_scripts`);
- :mod:`.client`: the OpenAI-compatible client and its error mapping, every provider's client
  behind one ``chat``, and the token estimates;
- :mod:`.rate_headers`: what a provider's rate-limit headers say.

May import: the state machine (the call log), pipelines, observability and the foundation.
"""
