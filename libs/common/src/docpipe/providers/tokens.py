"""Token counts estimated before a request is sent, for the TPM limit and the budget check.

docpipe does not ship a tokenizer per model. A prompt is estimated at one token per
``CHARS_PER_TOKEN`` characters: OpenAI's tokenizers average about four characters per token
on English prose, so three leaves a margin of a third for numbers, code, other scripts and
the chat template's own tokens. The answer may use up to its ``max_tokens``, so a request's
estimate is ``ceil(prompt characters / 3) + max_tokens``; after the call the limiter and the
call log are corrected from the ``usage`` the provider reports.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

__all__ = [
    "CHARS_PER_TOKEN",
    "MESSAGE_OVERHEAD_TOKENS",
    "estimate_prompt_tokens",
    "estimate_text_tokens",
]

CHARS_PER_TOKEN = 3
# The role markers a chat template wraps around every message.
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_text_tokens(text: str) -> int:
    """Tokens of ``text``, estimated with the documented margin."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate_prompt_tokens(messages: Iterable[Mapping[str, str]]) -> int:
    """Tokens of a chat prompt, estimated with the documented margin."""
    return sum(
        estimate_text_tokens(m.get("content", "")) + MESSAGE_OVERHEAD_TOKENS for m in messages
    )
