"""KIP-848 consumer-group records of `__consumer_offsets`, byte for byte as Kafka writes them.

Keys are classic (int16 version, then int16-length strings); the version is the record
type: 3 ConsumerGroupMetadata (group), 4 ConsumerGroupPartitionMetadata (group),
5 ConsumerGroupMemberMetadata (group, member), 6 ConsumerGroupTargetAssignmentMetadata
(group), 7 ConsumerGroupTargetAssignmentMember (group, member), 8
ConsumerGroupCurrentMemberAssignment (group, member).

Values are version 0 of Kafka's flexible schemas (`group-coordinator` resources):
compact strings and arrays (uvarint length + 1), 16-byte topic ids and an empty tagged
field section after every struct. Readers skip unknown tagged fields, so values written
by a newer Kafka (e.g. the tagged ClassicMemberMetadata of a mixed group) still load.
A null value is a tombstone. Malformed bytes raise `CoordinatorRecordError`.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from tidegate.protocol.coordinator_records import CoordinatorRecordError, _Reader

__all__ = [
    "CURRENT_ASSIGNMENT",
    "GROUP_METADATA",
    "MEMBER_METADATA",
    "PARTITION_METADATA",
    "REGULAR_EXPRESSION",
    "TARGET_MEMBER",
    "TARGET_METADATA",
    "Assignment",
    "ClassicMemberMetadata",
    "ConsumerGroupKey",
    "CurrentAssignmentValue",
    "MemberMetadataValue",
    "RegexValue",
    "TopicMetadata",
    "decode_consumer_key",
    "decode_current_assignment",
    "decode_epoch",
    "decode_member_metadata",
    "decode_partition_metadata",
    "decode_regex",
    "decode_target_member",
    "encode_consumer_key",
    "encode_current_assignment",
    "encode_epoch",
    "encode_member_metadata",
    "encode_partition_metadata",
    "encode_regex",
    "encode_target_member",
]

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_METADATA = 6
TARGET_MEMBER = 7
CURRENT_ASSIGNMENT = 8
REGULAR_EXPRESSION = 16
_WITH_MEMBER = frozenset({MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT,
                          REGULAR_EXPRESSION})
_KINDS = frozenset({GROUP_METADATA, PARTITION_METADATA, TARGET_METADATA} | _WITH_MEMBER)
_Q = struct.Struct(">q")

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_B = struct.Struct(">b")

# topic id -> partitions (sorted when written)
Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    kind: int  # the key version: GROUP_METADATA ... CURRENT_ASSIGNMENT
    group: str
    member: str | None = None


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    partitions: int


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """Tagged field 0 of ConsumerGroupMemberMetadataValue: a member of a consumer group
    that speaks the classic protocol (mixed groups): its session timeout and JoinGroup
    protocols (name, ConsumerProtocolSubscription bytes)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class RegexValue:
    """ConsumerGroupRegularExpressionValue: the topics a regex resolved to, the
    metadata version it was resolved at and when."""

    topics: tuple[str, ...]
    version: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)


# -- writing -----------------------------------------------------------------------------


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode("utf-8")
    return _uvarint(len(raw) + 1) + raw


def _str(s: str) -> bytes:
    raw = s.encode("utf-8")
    if len(raw) > 32767:
        raise CoordinatorRecordError(f"string of {len(raw)} bytes is too long for int16")
    return _H.pack(len(raw)) + raw


def _assignment(a: Assignment) -> bytes:
    parts = [_uvarint(len(a) + 1)]
    for tid in sorted(a):
        ps = sorted(a[tid])
        parts += [tid.bytes, _uvarint(len(ps) + 1), *(_I.pack(p) for p in ps), b"\x00"]
    return b"".join(parts)


def encode_consumer_key(key: ConsumerGroupKey) -> bytes:
    out = _H.pack(key.kind) + _str(key.group)
    if key.kind in _WITH_MEMBER:
        out += _str(key.member or "")
    return out


def encode_epoch(epoch: int) -> bytes:
    """ConsumerGroupMetadataValue (group epoch) or TargetAssignmentMetadataValue."""
    return _H.pack(0) + _I.pack(epoch) + b"\x00"


def encode_partition_metadata(topics: dict[str, TopicMetadata]) -> bytes:
    parts = [_H.pack(0), _uvarint(len(topics) + 1)]
    for name in sorted(topics):
        t = topics[name]
        # PartitionMetadata (racks) is deprecated since Kafka 4.0: always empty
        parts += [t.topic_id.bytes, _cstr(t.name), _I.pack(t.partitions), b"\x01", b"\x00"]
    parts.append(b"\x00")
    return b"".join(parts)


def _classic(c: ClassicMemberMetadata) -> bytes:
    parts = [_I.pack(c.session_timeout_ms), _uvarint(len(c.protocols) + 1)]
    for name, meta in c.protocols:
        parts += [_cstr(name), _uvarint(len(meta) + 1), meta, b"\x00"]
    parts.append(b"\x00")
    return b"".join(parts)


def encode_member_metadata(v: MemberMetadataValue) -> bytes:
    tags = b"\x00"
    if v.classic is not None:
        body = _classic(v.classic)
        tags = b"\x01\x00" + _uvarint(len(body)) + body  # one tagged field: tag 0
    return b"".join((
        _H.pack(0), _cstr(v.instance_id), _cstr(v.rack_id), _cstr(v.client_id),
        _cstr(v.client_host), _uvarint(len(v.subscribed_topic_names) + 1),
        *(_cstr(t) for t in v.subscribed_topic_names), _cstr(v.subscribed_topic_regex),
        _I.pack(v.rebalance_timeout_ms), _cstr(v.server_assignor), tags,
    ))


def encode_regex(v: RegexValue) -> bytes:
    return b"".join((
        _H.pack(0), _uvarint(len(v.topics) + 1), *(_cstr(t) for t in sorted(v.topics)),
        _Q.pack(v.version), _Q.pack(v.timestamp), b"\x00",
    ))


def encode_target_member(a: Assignment) -> bytes:
    return _H.pack(0) + _assignment(a) + b"\x00"


def encode_current_assignment(v: CurrentAssignmentValue) -> bytes:
    return b"".join((
        _H.pack(0), _I.pack(v.member_epoch), _I.pack(v.previous_member_epoch),
        _B.pack(v.state), _assignment(v.assigned), _assignment(v.pending_revocation),
        b"\x00",
    ))


# -- reading -----------------------------------------------------------------------------


def decode_consumer_key(raw: bytes) -> ConsumerGroupKey | None:
    """The key, or None when it is not one of the consumer-group record types."""
    r = _Reader(raw)
    kind = r.int16()
    if kind not in _KINDS:
        return None
    group = r.string()
    member = r.string() if kind in _WITH_MEMBER else None
    if r.pos != len(raw):
        raise CoordinatorRecordError(f"trailing bytes after consumer group key {kind}")
    return ConsumerGroupKey(kind, group, member)


def _value(raw: bytes) -> _Reader:
    r = _Reader(raw)
    version = r.int16()
    if version != 0:
        raise CoordinatorRecordError(f"unknown consumer group value version {version}")
    return r


def _end(r: _Reader) -> None:
    r.skip_tags()
    if r.pos != len(r.buf):
        raise CoordinatorRecordError("trailing bytes after consumer group value")


def _uuid(r: _Reader) -> uuid.UUID:
    return uuid.UUID(bytes=r._take(16))


def _read_assignment(r: _Reader) -> Assignment:
    out: Assignment = {}
    for _ in range(r.array_len(compact=True)):
        tid = _uuid(r)
        out[tid] = frozenset(r.int32() for _ in range(r.array_len(compact=True)))
        r.skip_tags()
    return out


def decode_epoch(raw: bytes) -> int:
    r = _value(raw)
    epoch = r.int32()
    _end(r)
    return epoch


def decode_partition_metadata(raw: bytes) -> dict[str, TopicMetadata]:
    r = _value(raw)
    out: dict[str, TopicMetadata] = {}
    for _ in range(r.array_len(compact=True)):
        tid = _uuid(r)
        name = r.string(compact=True)
        n = r.int32()
        for _ in range(r.array_len(compact=True)):  # deprecated racks: skipped
            r.int32()
            for _ in range(r.array_len(compact=True)):
                r.string(compact=True)
            r.skip_tags()
        r.skip_tags()
        out[name] = TopicMetadata(tid, name, n)
    _end(r)
    return out


def decode_member_metadata(raw: bytes) -> MemberMetadataValue:
    r = _value(raw)
    instance, rack = r.nstring(compact=True), r.nstring(compact=True)
    client_id, host = r.string(compact=True), r.string(compact=True)
    topics = tuple(r.string(compact=True) for _ in range(r.array_len(compact=True)))
    regex = r.nstring(compact=True)
    rebalance = r.int32()
    assignor = r.nstring(compact=True)
    classic = None
    for _ in range(r.uvarint()):  # tagged fields: 0 is ClassicMemberMetadata
        tag, size = r.uvarint(), r.uvarint()
        if tag != 0:
            r._take(size)
            continue
        end = r.pos + size
        session = r.int32()
        protocols = []
        for _ in range(r.array_len(compact=True)):
            protocols.append((r.string(compact=True), r.bytes_(compact=True)))
            r.skip_tags()
        r.skip_tags()
        if r.pos != end:
            raise CoordinatorRecordError("ClassicMemberMetadata has the wrong size")
        classic = ClassicMemberMetadata(session, tuple(protocols))
    if r.pos != len(r.buf):
        raise CoordinatorRecordError("trailing bytes after consumer group value")
    return MemberMetadataValue(instance, rack, client_id, host, topics, regex, rebalance,
                               assignor, classic)


def decode_regex(raw: bytes) -> RegexValue:
    r = _value(raw)
    topics = tuple(r.string(compact=True) for _ in range(r.array_len(compact=True)))
    version, timestamp = r.int64(), r.int64()
    _end(r)
    return RegexValue(topics, version, timestamp)


def decode_target_member(raw: bytes) -> Assignment:
    r = _value(raw)
    a = _read_assignment(r)
    _end(r)
    return a


def decode_current_assignment(raw: bytes) -> CurrentAssignmentValue:
    r = _value(raw)
    epoch, previous = r.int32(), r.int32()
    state = _B.unpack(r._take(1))[0]
    assigned = _read_assignment(r)
    pending = _read_assignment(r)
    _end(r)
    return CurrentAssignmentValue(epoch, previous, state, assigned, pending)
