"""The workers' egress NetworkPolicy: DNS, PostgreSQL, Redis, the provider and webhook
receivers, the last two on public addresses only, so a callback_url cannot reach the
cluster's or the cloud's private ranges even past docpipe's own check."""

from __future__ import annotations

import ipaddress
from typing import Any

import kubernetes_validate
import pytest

from tests.chart.helm import KUBE_VERSION, Obj, named, render, values_file

# Addresses a worker must never reach through the provider's or the webhooks' rule.
INTERNAL = [
    "10.1.2.3",
    "172.20.0.1",
    "192.168.0.10",
    "127.0.0.1",
    "169.254.169.254",
    "100.64.0.1",
    "0.0.0.1",
    "224.0.0.251",
    "::1",
    "fd00:ec2::254",
    "fe80::1",
    "::ffff:10.0.0.1",
    "64:ff9b::a00:1",
    "168.63.129.16",
]
PUBLIC = ["93.184.215.14", "8.8.8.8", "2606:4700::1111"]


def worker_policy(values: dict[str, Any]) -> Obj:
    policy = named(render(values), "NetworkPolicy", "docpipe-worker")
    kubernetes_validate.validate(policy, KUBE_VERSION, strict=True)
    return policy


def reachable(peers: list[Obj], address: str) -> bool:
    """Whether ``address`` falls in one of the ipBlock peers (and outside its except list)."""
    ip = ipaddress.ip_address(address)
    for peer in peers:
        block = peer["ipBlock"]
        network = ipaddress.ip_network(block["cidr"])
        if ip.version == network.version and ip in network:
            return not any(ip in ipaddress.ip_network(e) for e in block.get("except", []))
    return False


def rule_to_port(policy: Obj, port: int) -> Obj:
    return next(
        r for r in policy["spec"]["egress"] if any(p["port"] == port for p in r.get("ports", []))
    )


def webhook_rule(policy: Obj) -> Obj | None:
    """The rule to public addresses on any port: the webhooks'."""
    return next(
        (
            r
            for r in policy["spec"]["egress"]
            if "ports" not in r and "ipBlock" in r.get("to", [{}])[0]
        ),
        None,
    )


def test_workers_reach_dns_and_the_bundled_stores_only_by_their_pods() -> None:
    policy = worker_policy({})
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    dns = rule_to_port(policy, 53)
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    for port, component in ((5432, "postgresql"), (6379, "redis")):
        rule = rule_to_port(policy, port)
        [peer] = rule["to"]
        assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == component


@pytest.mark.parametrize("address", INTERNAL)
def test_the_provider_and_webhook_rules_exclude_every_internal_range(address: str) -> None:
    policy = worker_policy({"config": {"webhooksEnabled": True}})
    provider = rule_to_port(policy, 443)
    webhooks = webhook_rule(policy)
    assert webhooks is not None
    assert not reachable(provider["to"], address)
    assert not reachable(webhooks["to"], address)


def test_public_addresses_stay_reachable_for_the_provider_and_webhooks() -> None:
    policy = worker_policy({"config": {"webhooksEnabled": True}})
    webhooks = webhook_rule(policy)
    assert webhooks is not None
    for address in PUBLIC:
        assert reachable(rule_to_port(policy, 443)["to"], address)
        assert reachable(webhooks["to"], address)


def test_without_webhooks_workers_have_no_rule_to_arbitrary_ports() -> None:
    assert webhook_rule(worker_policy({})) is None


def test_the_fake_provider_is_reached_by_its_pods_on_its_port() -> None:
    policy = worker_policy(values_file("values-kind.yaml"))
    [peer] = rule_to_port(policy, 8100)["to"]
    assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "fake-llm"
    assert not any(p["port"] == 443 for r in policy["spec"]["egress"] for p in r.get("ports", []))


def test_external_stores_an_in_cluster_provider_and_extra_rules_are_configurable() -> None:
    database = [{"ipBlock": {"cidr": "10.0.5.0/24"}}]
    provider = [{"namespaceSelector": {"matchLabels": {"name": "vllm"}}}]
    collector = {
        "to": [{"namespaceSelector": {"matchLabels": {"name": "otel"}}}],
        "ports": [{"port": 4318, "protocol": "TCP"}],
    }
    policy = worker_policy(
        {
            "postgresql": {"enabled": False},
            "redis": {"enabled": False},
            "secrets": {
                "databaseUrl": "postgresql://u:p@10.0.5.4:6432/d",
                "redisUrl": "redis://r:6379/0",
            },
            "networkPolicy": {
                "workerEgress": {
                    "databaseTo": database,
                    "databasePort": 6432,
                    "providerTo": provider,
                    "providerPorts": [8000],
                    "extraEgress": [collector],
                }
            },
        }
    )
    assert rule_to_port(policy, 6432)["to"] == database
    assert "to" not in rule_to_port(policy, 6379), "any peer, on Redis' port only"
    assert rule_to_port(policy, 8000)["to"] == provider
    assert collector in policy["spec"]["egress"]


def test_egress_can_be_left_open() -> None:
    policy = worker_policy({"networkPolicy": {"workerEgress": {"enabled": False}}})
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert "egress" not in policy["spec"]
