"""``python -m docpipe_fake_llm``: serve the fake provider with uvicorn in this process.

Runs in the foreground so that ``exec`` makes it the process that receives SIGTERM; uvicorn
then stops accepting connections and finishes in-flight requests before exiting.
"""

from __future__ import annotations

import argparse
import os
from decimal import Decimal
from pathlib import Path

import uvicorn

from docpipe_fake_llm.app import create_app
from docpipe_fake_llm.billing import DEFAULT_PRICES, parse_price
from docpipe_fake_llm.config import (
    FakeLLMConfig,
    parse_error_rate,
    parse_latency,
    parse_model_limit,
)
from docpipe_fake_llm.mistakes import Mistakes

__all__ = ["main"]

# Hanging requests (fault "hang") must not hold a shutdown for their whole hang time.
_GRACEFUL_SHUTDOWN_S = 2


def main(argv: list[str] | None = None) -> None:
    """Parse flags (environment variables give their defaults) and serve until SIGTERM."""
    args = _parser().parse_args(argv)
    config = FakeLLMConfig(
        latency_ms=args.latency_ms,
        rpm=args.rpm,
        burst=args.burst,
        api_key=args.api_key or None,
        tpm=args.tpm,
        model_limits=dict(args.model_limit),
        rate_headers=not args.no_rate_headers,
        request_log=args.request_log,
        mistakes=Mistakes(dict(args.error_rate), args.extra_rate, args.error_seed),
        prices={**DEFAULT_PRICES, **dict(args.price)},
        batch_discount=args.batch_discount,
        batch_completion_s=args.batch_completion_s,
        batch_window_s=args.batch_window_s,
        batch_max_requests=args.batch_max_requests,
        batch_max_bytes=args.batch_max_bytes,
    )
    uvicorn.run(
        create_app(config),
        host=args.host,
        port=args.port,
        access_log=args.access_log,
        log_level=args.log_level,
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S,
    )


def _parser() -> argparse.ArgumentParser:
    env = os.environ.get
    # String defaults go through each flag's type, so a bad variable is reported like a bad flag.
    parser = argparse.ArgumentParser(prog="docpipe-fake-llm", description=__doc__)
    parser.add_argument("--host", default=env("FAKE_LLM_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=env("FAKE_LLM_PORT", "8100"))
    parser.add_argument(
        "--latency-ms",
        type=parse_latency,
        default=env("FAKE_LLM_LATENCY_MS", "0:0"),
        help="uniform latency range LOW:HIGH in milliseconds (default 0:0)",
    )
    parser.add_argument(
        "--rpm",
        type=int,
        default=env("FAKE_LLM_RPM", "0"),
        help="requests per minute over all requests; 0 means unlimited",
    )
    parser.add_argument(
        "--burst",
        type=int,
        default=env("FAKE_LLM_BURST", "0"),
        help="token bucket size; 0 means one second's worth of --rpm",
    )
    parser.add_argument(
        "--tpm",
        type=int,
        default=env("FAKE_LLM_TPM", "0"),
        help="tokens per minute over all requests (prompt + max_tokens, settled to the usage); "
        "0 means unlimited",
    )
    parser.add_argument(
        "--model-limit",
        type=parse_model_limit,
        action="append",
        default=[],
        metavar="MODEL=RPM:TPM",
        help="limits of one model, besides the key's (repeat for more models)",
    )
    parser.add_argument(
        "--no-rate-headers",
        action="store_true",
        help="send no x-ratelimit-* headers (they are sent by default, as OpenAI does)",
    )
    parser.add_argument(
        "--api-key",
        default=env("FAKE_LLM_API_KEY"),
        help="if set, require 'Authorization: Bearer <key>'",
    )
    parser.add_argument(
        "--request-log",
        type=Path,
        default=env("FAKE_LLM_REQUEST_LOG") or None,
        help="append each completion request's X-Client-Request-Id (or '-') to this file",
    )
    parser.add_argument(
        "--error-rate",
        type=parse_error_rate,
        action="append",
        default=[],
        metavar="MODEL_OR_PROMPT_VERSION=SHARE",
        help="get this share of a model's (or a prompt version's) values wrong on purpose: "
        "wrong, left out (repeat for more)",
    )
    parser.add_argument(
        "--extra-rate",
        type=float,
        default=0.0,
        help="chance per call and unstated field of an invented value (default 0)",
    )
    parser.add_argument(
        "--error-seed", type=int, default=0, help="the seed of every mistake (default 0)"
    )
    parser.add_argument(
        "--price",
        type=parse_price,
        action="append",
        default=[],
        metavar="MODEL=INPUT:OUTPUT",
        help="what a model's answers are billed, USD per million tokens (repeat for more)",
    )
    parser.add_argument(
        "--batch-discount",
        type=Decimal,
        default=env("FAKE_LLM_BATCH_DISCOUNT", "0.5"),
        help="the share batch requests are billed less (default 0.5)",
    )
    parser.add_argument(
        "--batch-completion-s",
        type=float,
        default=env("FAKE_LLM_BATCH_COMPLETION_S", "5"),
        help="seconds a batch takes to process its requests (default 5)",
    )
    parser.add_argument(
        "--batch-window-s",
        type=float,
        default=env("FAKE_LLM_BATCH_WINDOW_S") or None,
        help="a batch's completion window in seconds (default: the one it asks for)",
    )
    parser.add_argument(
        "--batch-max-requests",
        type=int,
        default=env("FAKE_LLM_BATCH_MAX_REQUESTS", "50000"),
        help="the most requests one batch may hold",
    )
    parser.add_argument(
        "--batch-max-bytes",
        type=int,
        default=env("FAKE_LLM_BATCH_MAX_BYTES", str(200 * 1024 * 1024)),
        help="the largest input file (OpenAI) or batch body (Anthropic), in bytes",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument("--access-log", action="store_true", help="log every request (slower)")
    return parser


if __name__ == "__main__":
    main()
