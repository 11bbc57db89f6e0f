"""ConsumerProtocolSubscription / -Assignment bytes: round trips, kafka-python as the
oracle for the exact layout, forward compatibility and malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment as KpAssignment,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolSubscription as KpSubscription,
)

from tidegate.assignors import Assignment, Subscription, TopicPartition
from tidegate.assignors.protocol import (
    ConsumerProtocolError,
    Writer,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    subscription_version,
)
from tidegate.assignors.types import group_by_topic

names = st.text(min_size=1, max_size=12)
tps = st.lists(st.builds(TopicPartition, names, st.integers(0, 2**31 - 1)),
               max_size=8, unique=True)
subscriptions = st.builds(
    Subscription,
    topics=st.lists(names, max_size=6).map(tuple),
    user_data=st.none() | st.binary(max_size=40),
    owned_partitions=tps.map(tuple),
    generation_id=st.integers(-1, 2**31 - 1),
    rack=st.none() | names,
)
assignments = st.builds(Assignment, partitions=tps.map(tuple),
                        user_data=st.none() | st.binary(max_size=40))


def expected_after(sub: Subscription, version: int) -> Subscription:
    """What survives encoding at `version` (later fields take their defaults)."""
    return Subscription(sub.topics, sub.user_data,
                        sub.owned_partitions if version >= 1 else (),
                        sub.generation_id if version >= 2 else -1,
                        rack=sub.rack if version >= 3 else None)


def owned_sorted(sub: Subscription) -> Subscription:
    return Subscription(sub.topics, sub.user_data, tuple(sorted(sub.owned_partitions)),
                        sub.generation_id, sub.group_instance_id, sub.rack, sub.member_id)


@settings(max_examples=300, deadline=None)
@given(subscriptions, st.integers(0, 3))
def test_subscription_round_trip(sub: Subscription, version: int) -> None:
    data = encode_subscription(sub, version)
    assert subscription_version(data) == version
    assert decode_subscription(data) == owned_sorted(expected_after(sub, version))


@settings(max_examples=300, deadline=None)
@given(assignments, st.integers(0, 3))
def test_assignment_round_trip(a: Assignment, version: int) -> None:
    assert decode_assignment(encode_assignment(a, version)) == a


@settings(max_examples=200, deadline=None)
@given(subscriptions, st.integers(0, 3))
def test_subscription_bytes_equal_kafka_pythons(sub: Subscription, version: int) -> None:
    kw: dict[str, object] = {"version": version, "topics": list(sub.topics),
                             "user_data": sub.user_data}
    if version >= 1:
        kw["owned_partitions"] = [KpSubscription.TopicPartition(topic=t, partitions=ps)
                                  for t, ps in group_by_topic(sub.owned_partitions)]
    if version >= 2:
        kw["generation_id"] = sub.generation_id
    if version >= 3:
        kw["rack_id"] = sub.rack
    theirs = KpSubscription(**kw).encode()
    assert encode_subscription(sub, version) == theirs
    assert decode_subscription(theirs) == owned_sorted(expected_after(sub, version))
    back = KpSubscription.decode(encode_subscription(sub, version))
    assert list(back.topics) == list(sub.topics) and back.user_data == sub.user_data


@settings(max_examples=200, deadline=None)
@given(assignments, st.integers(0, 3))
def test_assignment_bytes_equal_kafka_pythons(a: Assignment, version: int) -> None:
    theirs = KpAssignment(version=version, assigned_partitions=group_by_topic(a.partitions),
                          user_data=a.user_data).encode()
    assert encode_assignment(a, version) == theirs
    assert decode_assignment(theirs) == a
    back = KpAssignment.decode(encode_assignment(a, version))
    assert sorted(back.partitions()) == list(a.partitions)


def test_known_bytes() -> None:
    sub = Subscription(("a",), None, (TopicPartition("a", 1),), 5, rack="r")
    assert encode_subscription(sub) == (
        b"\x00\x03" b"\x00\x00\x00\x01\x00\x01a" b"\xff\xff\xff\xff"
        b"\x00\x00\x00\x01\x00\x01a\x00\x00\x00\x01\x00\x00\x00\x01"
        b"\x00\x00\x00\x05" b"\x00\x01r")
    assert encode_assignment(Assignment((TopicPartition("a", 0),), b""), 0) == (
        b"\x00\x00" b"\x00\x00\x00\x01\x00\x01a\x00\x00\x00\x01\x00\x00\x00\x00"
        b"\x00\x00\x00\x00")


def test_newer_versions_decode_with_the_newest_layout_and_ignore_trailing_fields() -> None:
    sub = Subscription(("a", "b"), b"u", (TopicPartition("a", 0),), 3, rack="r1")
    future = b"\x00\x07" + encode_subscription(sub)[2:] + b"\x00\x00\x00\x09more"
    assert decode_subscription(future) == sub
    a = Assignment((TopicPartition("x", 2),), None)
    assert decode_assignment(b"\x00\x09" + encode_assignment(a)[2:] + b"??") == a


def test_empty_bytes_are_empty_values_and_member_fields_are_kept() -> None:
    assert decode_assignment(b"") == Assignment()
    sub = decode_subscription(b"", member_id="m", group_instance_id="i")
    assert sub == Subscription((), member_id="m", group_instance_id="i")
    sub = decode_subscription(encode_subscription(Subscription(("t",))), member_id="m")
    assert sub.member_id == "m" and sub.topics == ("t",)


@pytest.mark.parametrize("data", [
    b"\x00", b"\xff\xff\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x01\x00\x05ab",
    b"\x00\x00\x7f\xff\xff\xff", b"\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x01",
])
def test_malformed_subscriptions_raise_consumer_protocol_error(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(data)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_consumer_protocol_error(data: bytes) -> None:
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(data)
        except ConsumerProtocolError:
            pass


def test_encoding_rejects_unknown_versions_and_oversized_strings() -> None:
    with pytest.raises(ValueError):
        encode_subscription(Subscription(()), 4)
    with pytest.raises(ValueError):
        encode_assignment(Assignment(), -1)
    with pytest.raises(ConsumerProtocolError):
        Writer().string("x" * 40000)
