"""`__consumer_offsets` key/value layouts: Kafka's bytes, every version, bad input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate.protocol.coordinator_records import (
    CoordinatorRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    assignment_partitions,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_assignment,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    encode_subscription,
    subscription_topics,
)


def s16(s: str | None) -> bytes:
    if s is None:
        return b"\xff\xff"
    return struct.pack(">h", len(s.encode())) + s.encode()


def compact(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    assert len(raw) + 1 < 128
    return bytes([len(raw) + 1]) + raw


def test_offset_commit_key_bytes() -> None:
    assert encode_offset_commit_key("g", "t", 3) == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x03"
    assert decode_key(b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x03") == OffsetCommitKey("g", "t", 3)
    assert decode_key(b"\x00\x00\x00\x01g\x00\x01t\x00\x00\x00\x03") == OffsetCommitKey("g", "t", 3)


def test_group_metadata_key_bytes() -> None:
    assert encode_group_metadata_key("grp") == b"\x00\x02\x00\x03grp"
    assert decode_key(b"\x00\x02\x00\x03grp") == GroupMetadataKey("grp")
    assert decode_key(b"\x00\x05\x00\x03grp") == 5  # someone else's record type: skipped


def test_offset_commit_value_v3_and_v1_bytes() -> None:
    v3 = encode_offset_commit_value(OffsetCommitValue(5, "m", 1000, leader_epoch=7))
    assert v3 == struct.pack(">hqi", 3, 5, 7) + s16("m") + struct.pack(">q", 1000)
    v1 = encode_offset_commit_value(OffsetCommitValue(5, "", 1000, expire_timestamp=2000))
    assert v1 == struct.pack(">hq", 1, 5) + s16("") + struct.pack(">qq", 1000, 2000)
    assert decode_offset_commit_value(v1) == OffsetCommitValue(5, "", 1000, -1, 2000)


def test_offset_commit_value_every_version_decodes() -> None:
    v0 = struct.pack(">hq", 0, 9) + s16("x") + struct.pack(">q", 11)
    v2 = struct.pack(">hq", 2, 9) + s16("x") + struct.pack(">q", 11)
    v4 = struct.pack(">hqi", 4, 9, 3) + compact("x") + struct.pack(">q", 11) + b"\x00"
    assert decode_offset_commit_value(v0) == OffsetCommitValue(9, "x", 11)
    assert decode_offset_commit_value(v2) == OffsetCommitValue(9, "x", 11)
    assert decode_offset_commit_value(v4) == OffsetCommitValue(9, "x", 11, 3)


MEMBER = MemberMetadata("m-1", "inst", "client", "/10.0.0.1", 30000, 10000, b"SUB", b"ASSIGN")


def test_group_metadata_value_v3_bytes() -> None:
    value = GroupMetadataValue("consumer", 4, "range", "m-1", 123, (MEMBER,))
    expected = (
        struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 4) + s16("range")
        + s16("m-1") + struct.pack(">q", 123) + struct.pack(">i", 1)
        + s16("m-1") + s16("inst") + s16("client") + s16("/10.0.0.1")
        + struct.pack(">ii", 30000, 10000) + struct.pack(">i", 3) + b"SUB"
        + struct.pack(">i", 6) + b"ASSIGN"
    )
    assert encode_group_metadata_value(value) == expected
    assert decode_group_metadata_value(expected) == value
    empty = GroupMetadataValue("consumer", 5, None, None, 9)
    assert decode_group_metadata_value(encode_group_metadata_value(empty)) == empty


def test_group_metadata_value_old_and_flexible_versions() -> None:
    member_v0 = s16("m") + s16("c") + s16("/h") + struct.pack(">i", 6000) + \
        struct.pack(">i", 1) + b"S" + struct.pack(">i", 1) + b"A"
    v0 = struct.pack(">h", 0) + s16("consumer") + struct.pack(">i", 2) + s16("range") + \
        s16("m") + struct.pack(">i", 1) + member_v0
    got = decode_group_metadata_value(v0)
    assert got.current_state_timestamp == -1 and got.members[0].rebalance_timeout == 6000
    assert got.members[0].group_instance_id is None
    member_v4 = compact("m") + compact(None) + compact("c") + compact("/h") + \
        struct.pack(">ii", 7000, 6000) + b"\x02S" + b"\x02A" + b"\x00"
    v4 = struct.pack(">h", 4) + compact("consumer") + struct.pack(">i", 2) + compact("range") + \
        compact("m") + struct.pack(">q", 5) + b"\x02" + member_v4 + b"\x00"
    got = decode_group_metadata_value(v4)
    assert got == GroupMetadataValue("consumer", 2, "range", "m", 5, (
        MemberMetadata("m", None, "c", "/h", 7000, 6000, b"S", b"A"),))


texts = st.text(max_size=20)


@given(st.integers(-(2**63), 2**63 - 1), texts, st.integers(0, 2**62),
       st.integers(-1, 2**31 - 1), st.one_of(st.just(-1), st.integers(0, 2**62)))
def test_offset_commit_value_roundtrip(offset: int, meta: str, ts: int, epoch: int,
                                       expire: int) -> None:
    v = OffsetCommitValue(offset, meta, ts, epoch if expire < 0 else -1, expire)
    assert decode_offset_commit_value(encode_offset_commit_value(v)) == v


members = st.builds(MemberMetadata, texts, st.none() | texts, texts, texts,
                    st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1),
                    st.binary(max_size=30), st.binary(max_size=30))


@given(st.builds(GroupMetadataValue, texts, st.integers(0, 2**31 - 1), st.none() | texts,
                 st.none() | texts, st.integers(-1, 2**62), st.lists(members, max_size=4)
                 .map(tuple)))
def test_group_metadata_value_roundtrip(value: GroupMetadataValue) -> None:
    assert decode_group_metadata_value(encode_group_metadata_value(value)) == value


@given(st.binary(max_size=80))
def test_garbage_raises_only_coordinator_record_error(data: bytes) -> None:
    for decode in (decode_key, decode_offset_commit_value, decode_group_metadata_value):
        try:
            decode(data)
        except CoordinatorRecordError:
            pass
    subscription_topics(data)
    assignment_partitions(data)


def test_truncated_values_are_errors() -> None:
    good = encode_group_metadata_value(GroupMetadataValue("consumer", 1, "r", "m", 1, (MEMBER,)))
    for cut in range(len(good)):
        with pytest.raises(CoordinatorRecordError):
            decode_group_metadata_value(good[:cut])


def test_consumer_protocol_bytes_match_kio() -> None:
    """Our readers against kio's encoder of Kafka's ConsumerProtocol schemas."""
    import io

    from kio.schema.consumer_protocol_assignment.v1.data import (
        ConsumerProtocolAssignment,
    )
    from kio.schema.consumer_protocol_assignment.v1.data import (
        TopicPartition as ATP,
    )
    from kio.schema.consumer_protocol_subscription.v1.data import (
        ConsumerProtocolSubscription,
    )
    from kio.schema.consumer_protocol_subscription.v1.data import (
        TopicPartition as STP,
    )
    from kio.serial import entity_writer

    def enc(entity: object, version: int) -> bytes:
        out = io.BytesIO()
        out.write(struct.pack(">h", version))
        entity_writer(type(entity))(out, entity)  # type: ignore[arg-type]
        return out.getvalue()

    sub = ConsumerProtocolSubscription(topics=("a", "b"), user_data=None,
                                       owned_partitions=(STP(topic="a", partitions=(1,)),))
    assert subscription_topics(enc(sub, 1)) == {"a", "b"}
    asg = ConsumerProtocolAssignment(
        assigned_partitions=(ATP(topic="a", partitions=(0, 2)), ATP(topic="b", partitions=(1,))),
        user_data=b"x")
    assert assignment_partitions(enc(asg, 1)) == {"a": [0, 2], "b": [1]}
    assert assignment_partitions(encode_assignment({"t": [3]})) == {"t": [3]}
    assert subscription_topics(encode_subscription(["t"])) == {"t"}
    assert assignment_partitions(b"") == {}
