"""The chart's side of the API's bounds: the trusted proxies that tell the API a client's
address (the per-address limit counts it)."""

from __future__ import annotations

from tests.chart.helm import named, render


def api_args(values: dict[str, object]) -> list[str]:
    deployment = named(render(values), "Deployment", "docpipe-api")
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def test_no_proxy_is_trusted_unless_named() -> None:
    assert "--forwarded-allow-ips" not in api_args({})


def test_named_proxies_are_trusted_for_the_client_address() -> None:
    args = api_args({"api": {"forwardedAllowIps": ["10.0.0.0/8", "192.168.1.1"]}})
    assert args[args.index("--forwarded-allow-ips") + 1] == "10.0.0.0/8,192.168.1.1"
