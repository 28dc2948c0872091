"""The provider side: the OpenAI-compatible client and its error mapping (:mod:`.client`),
the limit shared by every worker (:mod:`.limiter`), and the memoised calls a step makes
(:mod:`.calls`), recorded before they are sent.

May import: the state machine (the call log), pipelines, observability and the foundation.
"""
