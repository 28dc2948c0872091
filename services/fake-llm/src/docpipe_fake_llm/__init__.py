"""An OpenAI-compatible fake LLM provider for docpipe's tests and benchmarks.

It answers docpipe's three steps (``extract_sections``, ``extract_fields``, ``summarize``) by
really reading the contract text it is sent, and it can throttle (token bucket), slow down
(latency range) and fail on demand (faults queued through ``/control/faults``).
"""

from docpipe_fake_llm.app import create_app
from docpipe_fake_llm.config import FakeLLMConfig

__all__ = ["FakeLLMConfig", "create_app"]
