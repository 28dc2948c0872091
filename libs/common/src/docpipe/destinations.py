"""Where docpipe may send a request that a tenant aimed: the SSRF guard of webhooks.

A tenant's ``callback_url`` must never reach anything inside the deployment (PostgreSQL,
Redis, the provider's private endpoint, the kubelet, a cloud metadata service). Addresses
are judged after resolution, parsed by :mod:`ipaddress`, never by matching strings, so
``0x7f000001``, ``2130706433``, ``127.1``, ``[::1]`` and ``[::ffff:127.0.0.1]`` are all the
loopback address they resolve to. The URL is parsed with httpx, the client that sends the
request, so the host checked is the host connected to.

Two checks use this module: the API's cheap one at submission (scheme, credentials, literal
addresses, ``localhost``) and the delivery's real one, which resolves the name once, refuses
it when any address is forbidden and pins the connection to the checked addresses.

An allowlist (``DOCPIPE_WEBHOOK_ALLOWED_DESTINATIONS``: CIDRs and host names) lets local
development and tests reach receivers on private addresses.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import httpx

__all__ = [
    "DestinationPolicy",
    "DestinationRefused",
    "IPAddress",
    "Target",
    "forbidden_reason",
    "literal_addresses",
    "parse_target",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Cloud metadata and platform endpoints. Most are in link-local or ULA space anyway; Azure's
# wire server is a public address, so it has to be named.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",
        "169.254.170.2",
        "fd00:ec2::254",
        "100.100.100.200",
        "168.63.129.16",
    )
)
# Shared address space (carrier-grade NAT); Python's is_global already excludes it, named here
# so the refusal says what it is.
CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
# NAT64's well-known prefix carries an IPv4 address in its last 32 bits; a cluster with NAT64
# routes 64:ff9b::a00:1 to 10.0.0.1.
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class DestinationRefused(Exception):
    """The URL or one of its addresses is not a place docpipe sends requests to. The message
    names the reason for operators' logs; tenants see a generic text."""


@dataclass(frozen=True)
class Target:
    """A callback URL taken apart the way the HTTP client will use it."""

    url: httpx.URL
    scheme: str
    host: str  # lower case, without brackets or a trailing dot
    port: int


def parse_target(url: str) -> Target:
    """The URL's scheme, host and port; DestinationRefused unless it is http(s) without
    credentials and with a host."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise DestinationRefused(f"not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise DestinationRefused(f"scheme {parsed.scheme!r} is not http or https")
    if parsed.userinfo:
        raise DestinationRefused("credentials in the URL (user:password@) are not accepted")
    host = parsed.host.rstrip(".").lower()
    if not host:
        raise DestinationRefused("the URL has no host")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return Target(url=parsed, scheme=parsed.scheme, host=host, port=port)


def _embedded_ipv4(ip: IPAddress) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address stands for (mapped, 6to4, NAT64, Teredo's server)."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    found = [a for a in (ip.ipv4_mapped, ip.sixtofour) if a is not None]
    if ip.teredo:
        found += list(ip.teredo)
    if ip in NAT64:
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def forbidden_reason(ip: IPAddress) -> str | None:
    """Why docpipe must not connect to ``ip`` (None: a public unicast address)."""
    # The IPv4 address an IPv6 one carries first: its range is the one that says where the
    # connection would go (::ffff:10.0.0.1 is "private", not merely "reserved").
    for candidate in (*_embedded_ipv4(ip), ip):
        if candidate in METADATA_ADDRESSES:
            return f"{ip} is a cloud metadata address"
        checks = (
            ("loopback", candidate.is_loopback),
            ("unspecified", candidate.is_unspecified),
            ("link-local", candidate.is_link_local),
            ("multicast", candidate.is_multicast),
            ("reserved", candidate.is_reserved),
            (
                "carrier-grade NAT",
                isinstance(candidate, ipaddress.IPv4Address) and candidate in CGNAT,
            ),
            ("private", candidate.is_private),
            ("not globally routable", not candidate.is_global),
        )
        for name, hit in checks:
            if hit:
                return f"{ip} is {name}" + ("" if candidate is ip else f" ({candidate})")
    return None


def literal_addresses(host: str) -> list[IPAddress]:
    """The addresses a host written as a number stands for, parsed as the resolver parses
    them (``0x7f000001``, ``127.1``, ``::ffff:127.0.0.1``); empty for a host name. Never
    asks DNS."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError, ValueError):
        return []
    return _unique(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos)


def _unique(addresses: Iterable[IPAddress]) -> list[IPAddress]:
    return list(dict.fromkeys(addresses))


@dataclass(frozen=True)
class DestinationPolicy:
    """Public addresses only, except what the allowlist names."""

    allowed_networks: tuple[IPNetwork, ...] = ()
    allowed_hosts: tuple[str, ...] = ()  # exact names, or ".suffix" for every name under it

    @classmethod
    def from_allowlist(cls, entries: Iterable[IPNetwork | str]) -> DestinationPolicy:
        """The policy of an allowlist as ``DOCPIPE_WEBHOOK_ALLOWED_DESTINATIONS`` parses it
        (docpipe.settings.webhooks): networks, and host names."""
        listed = tuple(entries)
        return cls(
            allowed_networks=tuple(e for e in listed if not isinstance(e, str)),
            allowed_hosts=tuple(e for e in listed if isinstance(e, str)),
        )

    def host_is_allowed(self, host: str) -> bool:
        return any(
            host.endswith(name) if name.startswith(".") else host == name
            for name in self.allowed_hosts
        )

    def check_address(self, ip: IPAddress) -> None:
        """DestinationRefused unless ``ip`` is public or in an allowed network."""
        if any(ip in network for network in self.allowed_networks):
            return
        if (reason := forbidden_reason(ip)) is not None:
            raise DestinationRefused(reason)

    def check_resolved(self, target: Target, addresses: Sequence[IPAddress]) -> None:
        """DestinationRefused when any address the host resolved to is forbidden: a name
        with one private address among public ones is refused as a whole."""
        if not addresses:
            raise DestinationRefused(f"{target.host} resolved to no address")
        if self.host_is_allowed(target.host):
            return
        for ip in addresses:
            self.check_address(ip)

    def check_submitted(self, url: str) -> Target:
        """What can be refused without asking DNS: the scheme, credentials, ``localhost``
        names and hosts written as forbidden addresses. The delivery checks again, after
        resolving the name."""
        target = parse_target(url)
        if self.host_is_allowed(target.host):
            return target
        if target.host == "localhost" or target.host.endswith(".localhost"):
            raise DestinationRefused(f"{target.host} is loopback")
        for ip in literal_addresses(target.host):
            self.check_address(ip)
        return target
