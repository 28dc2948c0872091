"""The SSRF guard of webhooks: forbidden destinations are refused in every spelling, at
submission where that is cheap and, for real, after resolution at delivery; the connection
goes to the address that was checked; one deadline bounds the whole request and only a few
bytes of the answer are read."""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path

import pytest

from docpipe.destinations import (
    DestinationPolicy,
    DestinationRefused,
    forbidden_reason,
    literal_addresses,
)
from docpipe.settings import Settings
from docpipe.state.webhooks import CONNECTION_FAILED, TIMEOUT
from docpipe.worker.webhook_request import RequestFailed, post_pinned, resolve_host
from tests.support.receivers import raw_receiver, recording_receiver, stub_resolver, tls_contexts

OPEN = DestinationPolicy()
LOCAL = DestinationPolicy.from_allowlist([ipaddress.ip_network("127.0.0.1/32")])

# Hosts that all mean something inside the deployment, however they are written.
FORBIDDEN_HOSTS = [
    "127.0.0.1",
    "0x7f000001",
    "2130706433",
    "127.1",
    "0177.0.0.1",
    "0x7f.0.0.1",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[0:0:0:0:0:0:0:1]",
    "169.254.169.254",
    "[fd00:ec2::254]",
    "168.63.129.16",
    "100.100.100.200",
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "100.64.0.1",
    "[fc00::1]",
    "[fe80::1]",
    "0.0.0.0",
    "[::]",
    "224.0.0.1",
    "[ff02::1]",
    "240.0.0.1",
    "255.255.255.255",
    "[64:ff9b::a00:1]",
    "[2002:7f00:1::]",
    "localhost",
    "hooks.localhost",
]


@pytest.mark.parametrize("host", FORBIDDEN_HOSTS)
def test_a_forbidden_address_in_any_spelling_is_refused_at_submission(host: str) -> None:
    with pytest.raises(DestinationRefused):
        OPEN.check_submitted(f"http://{host}:6379/hook")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/x",
        "file:///etc/passwd",
        "gopher://example.com/",
        "redis://redis:6379",
        "http://user:pw@example.com/hook",
        "https://token@example.com/hook",
    ],
)
def test_other_schemes_and_credentials_in_the_url_are_refused(url: str) -> None:
    with pytest.raises(DestinationRefused):
        OPEN.check_submitted(url)


def test_public_addresses_and_names_pass_the_submission_check_without_asking_dns() -> None:
    assert OPEN.check_submitted("https://203.0.113.7.nip.example/hook").host
    assert OPEN.check_submitted("http://8.8.8.8:8080/hook").port == 8080
    assert OPEN.check_submitted("https://[2606:4700::1111]/hook").host == "2606:4700::1111"
    assert literal_addresses("hooks.example.com") == []


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("169.254.169.254", "metadata"),
        ("168.63.129.16", "metadata"),
        ("224.0.0.251", "multicast"),
        ("::ffff:10.0.0.1", "private (10.0.0.1)"),
        ("64:ff9b::a9fe:a9fe", "metadata"),
        ("fe80::1", "link-local"),
        ("::", "unspecified"),
    ],
)
def test_each_forbidden_range_is_named(address: str, kind: str) -> None:
    reason = forbidden_reason(ipaddress.ip_address(address))
    assert reason is not None and kind in reason
    assert forbidden_reason(ipaddress.ip_address("93.184.215.14")) is None


def test_the_allowlist_admits_exactly_its_networks_and_names() -> None:
    allowlist = "127.0.0.1/32,hooks.internal,.svc.local"
    policy = DestinationPolicy.from_allowlist(
        Settings(webhook_allowed_destinations=allowlist).webhook_allowed_destinations  # type: ignore[arg-type]
    )
    policy.check_submitted("http://127.0.0.1:8080/hook")
    policy.check_submitted("http://hooks.internal/hook")
    policy.check_submitted("http://receiver.team.svc.local/hook")
    with pytest.raises(DestinationRefused):
        policy.check_submitted("http://127.0.0.2:8080/hook")


def test_a_name_with_one_private_address_among_public_ones_is_refused() -> None:
    target = OPEN.check_submitted("https://hooks.example.com/x")
    addresses = [ipaddress.ip_address(a) for a in ("93.184.215.14", "10.0.0.7")]
    with pytest.raises(DestinationRefused, match=r"10\.0\.0\.7 is private"):
        OPEN.check_resolved(target, addresses)


@pytest.mark.parametrize(
    "host", ["0x7f000001", "2130706433", "127.1", "[::1]", "[::ffff:127.0.0.1]", "localhost"]
)
def test_at_delivery_the_real_resolver_turns_every_spelling_into_a_refused_address(
    host: str,
) -> None:
    with recording_receiver() as (url, handler):
        port = url.split(":")[2].split("/")[0]
        with pytest.raises(DestinationRefused):
            post_pinned(
                f"http://{host}:{port}/hook",
                b"{}",
                {},
                policy=OPEN,
                deadline_s=5,
                max_response_bytes=0,
                resolver=resolve_host,
            )
    assert handler.received == [], "nothing reached the receiver"


def test_a_dns_name_that_resolves_to_a_private_address_is_refused_before_connecting() -> None:
    calls: list[str] = []
    resolver = stub_resolver({"hooks.example.test": ["10.20.30.40"]}, calls)
    with pytest.raises(DestinationRefused, match="private"):
        post_pinned(
            "https://hooks.example.test/hook",
            b"{}",
            {},
            policy=OPEN,
            deadline_s=5,
            max_response_bytes=0,
            resolver=resolver,
        )
    assert calls == ["hooks.example.test"]


def test_the_connection_goes_to_the_checked_address_with_the_original_host_header() -> None:
    calls: list[str] = []
    with recording_receiver() as (url, handler):
        port = int(url.split(":")[2].split("/")[0])
        # Only the stub knows this name: a second lookup by the client would fail.
        resolver = stub_resolver({"receiver.test": ["127.0.0.1"]}, calls)
        answer = post_pinned(
            f"http://receiver.test:{port}/hook",
            b'{"a":1}',
            {"Content-Type": "application/json"},
            policy=LOCAL,
            deadline_s=5,
            max_response_bytes=1024,
            resolver=resolver,
        )
    assert answer.status == 200
    assert calls == ["receiver.test"], "resolved exactly once"
    assert handler.received[0].headers["Host"] == f"receiver.test:{port}"
    assert handler.received[0].body == b'{"a":1}'


def test_https_to_a_pinned_address_sends_the_name_as_sni_and_verifies_it(tmp_path: Path) -> None:
    server_tls, client_tls = tls_contexts("receiver.test", tmp_path)
    with recording_receiver(tls=server_tls) as (url, handler):
        port = int(url.split(":")[2].split("/")[0])
        resolver = stub_resolver({"receiver.test": ["127.0.0.1"], "impostor.test": ["127.0.0.1"]})
        answer = post_pinned(
            f"https://receiver.test:{port}/hook",
            b"{}",
            {},
            policy=LOCAL,
            deadline_s=5,
            max_response_bytes=0,
            resolver=resolver,
            verify=client_tls,
        )
        assert answer.status == 200
        assert handler.server_names == ["receiver.test"]
        # The same address under a name its certificate does not carry: refused by TLS.
        with pytest.raises(RequestFailed) as failed:
            post_pinned(
                f"https://impostor.test:{port}/hook",
                b"{}",
                {},
                policy=LOCAL,
                deadline_s=5,
                max_response_bytes=0,
                resolver=resolver,
                verify=client_tls,
            )
    assert failed.value.kind == CONNECTION_FAILED
    assert len(handler.received) == 1


@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_a_receiver_that_never_finishes_answering_is_cut_off_at_the_deadline(mode: str) -> None:
    # A trickling receiver sends a byte every 0.2 s for a minute: a timeout per read never
    # fires, only a deadline for the whole request does.
    with raw_receiver(mode) as receiver:
        started = time.monotonic()
        with pytest.raises(RequestFailed) as failed:
            post_pinned(receiver.url, b"{}", {}, policy=LOCAL, deadline_s=1.0, max_response_bytes=0)
        took = time.monotonic() - started
        connection = receiver.connections[0]
        # The receiver sees docpipe hang up (closed_at is set when its read or write fails).
        deadline = time.monotonic() + 10
        while connection.closed_at is None and time.monotonic() < deadline:
            time.sleep(0.05)
    assert failed.value.kind == TIMEOUT
    assert connection.closed_at is not None, "docpipe closed the connection"
    # Bounded by the deadline, not by the receiver's minute (generous for a loaded machine).
    assert took < 30


def test_only_the_first_bytes_of_an_endless_answer_are_read() -> None:
    with raw_receiver("endless") as receiver:
        answer = post_pinned(
            receiver.url, b"{}", {}, policy=LOCAL, deadline_s=10, max_response_bytes=4096
        )
        connection = receiver.connections[0]
        deadline = time.monotonic() + 10
        while connection.closed_at is None and time.monotonic() < deadline:
            time.sleep(0.05)
    assert answer.status == 200
    # At most the cap plus one network read (64 KiB), of a body of 1 GB.
    assert 0 < answer.body_bytes_read <= 4096 + 65536
    assert connection.closed_at is not None
    assert connection.bytes_sent < 50_000_000, "the receiver could not push its whole body"


def test_redirects_are_not_followed() -> None:
    with recording_receiver(302) as (url, handler):
        answer = post_pinned(url, b"{}", {}, policy=LOCAL, deadline_s=5, max_response_bytes=0)
    assert answer.status == 302
    assert len(handler.received) == 1
