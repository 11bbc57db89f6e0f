"""Cluster mode: Metadata and FindCoordinator give each client the brokers' endpoints on
the listener it came in on (Kafka's rule), not those of the inter-broker listener.

Found by librdkafka's 0142 on a 3-broker cluster with PLAINTEXT and SASL listeners: its
SASL client was sent to the PLAINTEXT ports and every SaslHandshake was refused."""

from __future__ import annotations

from tidegate.replication.znodes import BrokerEndpoint, BrokerInfo
from tidegate.server.cluster.metadata import ClusterMetadata
from tidegate.server.metadata_view import broker_on, brokers_on


def _info(bid: int, rack: str | None = None, sasl: bool = True) -> BrokerInfo:
    eps = [BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + bid)]
    if sasl:
        eps.append(BrokerEndpoint("SASL_SSL", "127.0.0.1", 9100 + bid, "SASL_SSL"))
    return BrokerInfo(bid, tuple(eps), rack)


def _metadata() -> ClusterMetadata:
    md = ClusterMetadata(1, "PLAINTEXT", "cluster")
    md.brokers_info = {1: _info(1, "r1"), 2: _info(2, "r2"), 3: _info(3, sasl=False)}
    return md


def test_a_client_gets_the_endpoints_of_its_own_listener() -> None:
    md = _metadata()
    got = [(b.node_id, b.host, b.port, b.rack) for b in brokers_on(md, "SASL_SSL")]
    # broker 3 has no SASL_SSL listener: left out, as Kafka leaves it out
    assert got == [(1, "127.0.0.1", 9101, "r1"), (2, "127.0.0.1", 9102, "r2")]
    assert [b.port for b in brokers_on(md, "PLAINTEXT")] == [9001, 9002, 9003]


def test_one_broker_on_a_listener() -> None:
    md = _metadata()
    ep = broker_on(md, 2, "SASL_SSL")
    assert ep is not None and (ep.port, ep.rack) == (9102, "r2")
    assert broker_on(md, 3, "SASL_SSL") is None
    assert broker_on(md, 4, "SASL_SSL") is None
    plain = broker_on(md, 3, "PLAINTEXT")
    assert plain is not None and plain.port == 9003


def test_without_a_listener_the_inter_broker_one() -> None:
    md = _metadata()
    assert [b.port for b in brokers_on(md, "")] == [9001, 9002, 9003]
