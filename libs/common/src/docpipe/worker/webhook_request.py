"""One webhook request: to an address checked after resolution and pinned for the connection,
within one deadline for all of it, reading at most a few bytes of the answer.

- The host is resolved once (through ``resolver``, the test seam) and refused when any of
  its addresses is forbidden (docpipe.destinations). The connection goes to the checked
  address itself: the URL's host is replaced by the address, the original ``Host`` header is
  sent and, for https, the original name is the TLS server name, so the certificate is
  verified against it. There is no second lookup a rebinding DNS server could answer
  differently.
- ``deadline_s`` bounds the whole attempt: resolution, connection, TLS, sending, the
  answer's headers and the read. A receiver that trickles one byte at a time is cut off at
  the deadline like one that never answers (httpx's own timeouts apply per read only).
- Redirects are not followed, no proxy or environment setting is used, and the answer's
  body is read raw (never decompressed) up to ``max_response_bytes``, give or take one
  network read.

Failures are raised as :class:`RequestFailed` with a generic kind (docpipe.state.webhooks'
texts), or DestinationRefused; the details go to the caller's logs, never to the tenant.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import anyio
import httpx

from docpipe.destinations import DestinationPolicy, IPAddress, parse_target
from docpipe.state.webhooks import CONNECTION_FAILED, TIMEOUT

__all__ = ["Answer", "RequestFailed", "Resolver", "post_pinned", "resolve_host"]

Resolver = Callable[[str, int], Awaitable[Sequence[IPAddress]]]


class RequestFailed(Exception):
    """The request got no answer; ``kind`` is what the tenant may see."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


@dataclass(frozen=True)
class Answer:
    status: int
    body_bytes_read: int


async def resolve_host(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to, in the resolver's order (IP literals in any
    spelling the system resolver accepts resolve to themselves)."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = (ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos)
    return list(dict.fromkeys(addresses))


def post_pinned(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    policy: DestinationPolicy,
    deadline_s: float,
    max_response_bytes: int,
    resolver: Resolver = resolve_host,
    verify: ssl.SSLContext | bool = True,
) -> Answer:
    """POST ``body`` to ``url`` as described in the module docstring; DestinationRefused or
    RequestFailed when there is no answer."""
    target = parse_target(url)  # DestinationRefused for other schemes or credentials

    async def attempt() -> Answer:
        try:
            with anyio.fail_after(deadline_s):
                addresses = await resolver(target.host, target.port)
                policy.check_resolved(target, addresses)
                return await _post_to_first_reachable(addresses)
        except TimeoutError as exc:
            raise RequestFailed(TIMEOUT, f"no answer within {deadline_s:g}s") from exc
        except httpx.TimeoutException as exc:
            raise RequestFailed(TIMEOUT, type(exc).__name__) from exc
        except (httpx.TransportError, OSError) as exc:
            raise RequestFailed(CONNECTION_FAILED, f"{type(exc).__name__}: {exc}") from exc

    async def _post_to_first_reachable(addresses: Sequence[IPAddress]) -> Answer:
        pinned_headers = {**headers, "Host": target.url.netloc.decode("ascii")}
        # The certificate is checked against the name the tenant gave, not the address.
        extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
        async with httpx.AsyncClient(
            trust_env=False, follow_redirects=False, verify=verify, timeout=deadline_s
        ) as client:
            unreachable: httpx.ConnectError | None = None
            for address in addresses:
                request = client.build_request(
                    "POST",
                    target.url.copy_with(host=str(address)),
                    content=body,
                    headers=pinned_headers,
                    extensions=extensions,
                )
                try:
                    response = await client.send(request, stream=True)
                except httpx.ConnectError as exc:
                    unreachable = exc
                    continue
                try:
                    return Answer(response.status_code, await _read_capped(response))
                finally:
                    await response.aclose()
            assert unreachable is not None, "resolution gave no address"
            raise unreachable

    async def _read_capped(response: httpx.Response) -> int:
        read = 0
        if max_response_bytes:
            async for chunk in response.aiter_raw():
                read += len(chunk)
                if read >= max_response_bytes:
                    break
        return read

    return anyio.run(attempt)
