"""Assignor lookup by protocol and Java class name; rebalance protocol choice."""

from __future__ import annotations

import pytest

from tidegate.assignors import ASSIGNORS, RebalanceProtocol, lookup, rebalance_protocol


def test_protocol_names_are_the_ones_clients_send() -> None:
    assert list(ASSIGNORS) == ["range", "roundrobin", "sticky", "cooperative-sticky"]
    assert lookup("org.apache.kafka.clients.consumer.CooperativeStickyAssignor").name == \
        "cooperative-sticky"
    assert lookup(" Range ").name == "range"
    with pytest.raises(KeyError, match="known are range, roundrobin"):
        lookup("fancy")


def test_rebalance_protocol_is_the_highest_all_support() -> None:
    assert rebalance_protocol([lookup("range"), lookup("cooperative-sticky")]) == \
        RebalanceProtocol.EAGER
    assert rebalance_protocol([lookup("cooperative-sticky")]) == RebalanceProtocol.COOPERATIVE
    with pytest.raises(ValueError):
        rebalance_protocol([])


def test_user_data_per_assignor() -> None:
    owned = [("t", 0)]
    assert lookup("range").user_data(owned, 3) is None
    assert lookup("cooperative-sticky").user_data(owned, 3) == b"\x00\x00\x00\x03"
    assert lookup("sticky").user_data(owned, 3) is not None
