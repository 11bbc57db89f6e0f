"""`__consumer_offsets` record layouts, byte for byte as Kafka writes them.

Every record's key and value start with an int16 version. Keys (never flexible):

- version 0/1, `OffsetCommitKey`: group string, topic string, partition int32;
- version 2, `GroupMetadataKey`: group string.

Values (schemas in Kafka's `group-coordinator/src/main/resources/common/message`):

- `OffsetCommitValue` v0..v4: offset int64, [v3+ leaderEpoch int32], metadata string,
  commitTimestamp int64, [v1 only: expireTimestamp int64]; v4 is the flexible form.
  We write v1 when a commit carries an explicit retention (OffsetCommit v2-v4
  `retention_time`), else v3 — what Kafka 2.1+ writes.
- `GroupMetadataValue` v0..v4: protocolType string, generation int32, protocol nullable
  string, leader nullable string, [v2+ currentStateTimestamp int64], members array of
  (memberId, [v3+ groupInstanceId nullable], clientId, clientHost, [v1+
  rebalanceTimeout int32], sessionTimeout int32, subscription bytes, assignment bytes);
  v4 is the flexible form. We write v3, as Kafka 2.3+ does.

A null value (tombstone) deletes the key. Readers accept every version above, so logs
written by Kafka load here and Kafka's tools (`OffsetsMessageFormatter`,
`GroupMetadataMessageFormatter`) read ours. Malformed bytes raise
`CoordinatorRecordError`, never IndexError or struct.error.

The `ConsumerProtocol` helpers read the topics out of a consumer's subscription and the
partitions out of an assignment (used for OffsetDelete, offset expiry and the CLI);
the coordinator never needs anything else from those opaque bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSET_COMMIT_KEY_VERSION",
    "CoordinatorRecordError",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "assignment_partitions",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_assignment",
    "encode_group_metadata_key",
    "encode_group_metadata_value",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
    "encode_subscription",
    "offset_commit_fields",
    "subscription_topics",
]

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_HQ = struct.Struct(">hq")
_HQI = struct.Struct(">hqi")


class CoordinatorRecordError(ValueError):
    """A coordinator record's key or value cannot be decoded."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    expire_timestamp: int = -1  # only stored by value v1


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...] = field(default=())


# -- writing ---------------------------------------------------------------------------


def _str(s: str) -> bytes:
    raw = s.encode("utf-8")
    if len(raw) > 32767:
        raise CoordinatorRecordError(f"string of {len(raw)} bytes is too long for int16")
    return _H.pack(len(raw)) + raw


def _nstr(s: str | None) -> bytes:
    return b"\xff\xff" if s is None else _str(s)


def _bytes(b: bytes) -> bytes:
    return _I.pack(len(b)) + b


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return b"".join(
        (_H.pack(OFFSET_COMMIT_KEY_VERSION), _str(group), _str(topic), _I.pack(partition))
    )


def encode_group_metadata_key(group: str) -> bytes:
    return _H.pack(GROUP_METADATA_KEY_VERSION) + _str(group)


def encode_offset_commit_value(v: OffsetCommitValue) -> bytes:
    if v.expire_timestamp >= 0:
        return b"".join(
            (
                _HQ.pack(1, v.offset),
                _str(v.metadata),
                _Q.pack(v.commit_timestamp),
                _Q.pack(v.expire_timestamp),
            )
        )
    return b"".join((_HQI.pack(3, v.offset, v.leader_epoch), _str(v.metadata),
                     _Q.pack(v.commit_timestamp)))


def encode_group_metadata_value(v: GroupMetadataValue) -> bytes:
    parts = [
        _H.pack(GROUP_METADATA_VALUE_VERSION),
        _str(v.protocol_type),
        _I.pack(v.generation),
        _nstr(v.protocol),
        _nstr(v.leader),
        _Q.pack(v.current_state_timestamp),
        _I.pack(len(v.members)),
    ]
    for m in v.members:
        parts += [
            _str(m.member_id),
            _nstr(m.group_instance_id),
            _str(m.client_id),
            _str(m.client_host),
            _I.pack(m.rebalance_timeout),
            _I.pack(m.session_timeout),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


# -- reading ---------------------------------------------------------------------------


class _Reader:
    """Bounds-checked reads of Kafka's primitive types (classic and compact forms)."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise CoordinatorRecordError(f"record truncated at byte {self.pos}")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def int16(self) -> int:
        return int(_H.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_I.unpack(self._take(4))[0])

    def int64(self) -> int:
        return int(_Q.unpack(self._take(8))[0])

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self._take(1)[0]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7
            if shift > 35:
                raise CoordinatorRecordError("varint too long")

    def nstring(self, compact: bool = False) -> str | None:
        n = self.uvarint() - 1 if compact else self.int16()
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise CoordinatorRecordError(f"string is not UTF-8: {e}") from None

    def string(self, compact: bool = False) -> str:
        s = self.nstring(compact)
        if s is None:
            raise CoordinatorRecordError("null where a string is required")
        return s

    def bytes_(self, compact: bool = False) -> bytes:
        n = self.uvarint() - 1 if compact else self.int32()
        if n < 0:
            raise CoordinatorRecordError("null where bytes are required")
        return self._take(n)

    def array_len(self, compact: bool = False) -> int:
        n = self.uvarint() - 1 if compact else self.int32()
        if n < 0 or n > len(self.buf):
            raise CoordinatorRecordError(f"invalid array length {n}")
        return n

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())


def decode_key(key: bytes) -> OffsetCommitKey | GroupMetadataKey | int:
    """The key's record, or its version (int) when it is not a group-coordinator key we
    know (e.g. the KIP-848 consumer-group records): callers skip those."""
    try:
        if len(key) >= 2 and key[1] in (0, 1) and key[0] == 0:
            glen = _H.unpack_from(key, 2)[0]
            tpos = 4 + glen
            tlen = _H.unpack_from(key, tpos)[0]
            ppos = tpos + 2 + tlen
            if glen < 0 or tlen < 0 or ppos + 4 != len(key):
                raise CoordinatorRecordError("malformed offset commit key")
            return OffsetCommitKey(
                key[4:tpos].decode("utf-8"),
                key[tpos + 2 : ppos].decode("utf-8"),
                _I.unpack_from(key, ppos)[0],
            )
        r = _Reader(key)
        version = r.int16()
        if version == 2:
            group = r.string()
            if r.pos != len(key):
                raise CoordinatorRecordError("trailing bytes after group metadata key")
            return GroupMetadataKey(group)
        return version
    except (struct.error, UnicodeDecodeError) as e:
        raise CoordinatorRecordError(f"malformed key: {e}") from None


_V3 = struct.Struct(">hqih")


def offset_commit_fields(value: bytes) -> tuple[int, int, str, int, int]:
    """(offset, leader epoch, metadata, commit timestamp, expire timestamp) of an
    OffsetCommitValue; a tuple, because loading builds a million of them."""
    n = len(value)
    if n >= 24 and value[1] == 3 and value[0] == 0:  # v3, the common case
        _, offset, epoch, mlen = _V3.unpack_from(value)
        if 16 + mlen + 8 == n:
            try:
                meta = value[16 : 16 + mlen].decode("utf-8") if mlen else ""
            except UnicodeDecodeError as e:
                raise CoordinatorRecordError(f"metadata is not UTF-8: {e}") from None
            return offset, epoch, meta, _Q.unpack_from(value, 16 + mlen)[0], -1
    r = _Reader(value)
    version = r.int16()
    if not 0 <= version <= 4:
        raise CoordinatorRecordError(f"unknown offset commit value version {version}")
    compact = version >= 4
    offset = r.int64()
    epoch = r.int32() if version >= 3 else -1
    meta = r.string(compact)
    ts = r.int64()
    expire = r.int64() if version == 1 else -1
    if compact:
        r.skip_tags()
    if r.pos != n:
        raise CoordinatorRecordError("trailing bytes after an offset commit value")
    return offset, epoch, meta, ts, expire


def decode_offset_commit_value(value: bytes) -> OffsetCommitValue:
    offset, epoch, meta, ts, expire = offset_commit_fields(value)
    return OffsetCommitValue(offset, meta, ts, epoch, expire)


def decode_group_metadata_value(value: bytes) -> GroupMetadataValue:
    r = _Reader(value)
    version = r.int16()
    if not 0 <= version <= 4:
        raise CoordinatorRecordError(f"unknown group metadata value version {version}")
    c = version >= 4
    protocol_type = r.string(c)
    generation = r.int32()
    protocol = r.nstring(c)
    leader = r.nstring(c)
    ts = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len(c)):
        member_id = r.string(c)
        instance = r.nstring(c) if version >= 3 else None
        client_id = r.string(c)
        client_host = r.string(c)
        rebalance = r.int32() if version >= 1 else -1
        session = r.int32()
        subscription = r.bytes_(c)
        assignment = r.bytes_(c)
        if c:
            r.skip_tags()
        members.append(
            MemberMetadata(
                member_id, instance, client_id, client_host, rebalance if rebalance >= 0
                else session, session, subscription, assignment,
            )
        )
    if c:
        r.skip_tags()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, ts, tuple(members))


# -- the consumer protocol's embedded bytes ----------------------------------------------


def subscription_topics(data: bytes) -> frozenset[str] | None:
    """Topics of a `ConsumerProtocolSubscription` (any version: all start with the
    version and the topics array); None if the bytes are not one."""
    try:
        r = _Reader(data)
        if r.int16() < 0:
            return None
        return frozenset(r.string() for _ in range(r.array_len()))
    except CoordinatorRecordError:
        return None


def assignment_partitions(data: bytes) -> dict[str, list[int]] | None:
    """Partitions of a `ConsumerProtocolAssignment` (v0..v3: version, then an array of
    (topic, [partition])); {} for empty bytes; None if unreadable."""
    if not data:
        return {}
    try:
        r = _Reader(data)
        if r.int16() < 0:
            return None
        out: dict[str, list[int]] = {}
        for _ in range(r.array_len()):
            topic = r.string()
            out.setdefault(topic, []).extend(r.int32() for _ in range(r.array_len()))
        return out
    except CoordinatorRecordError:
        return None


def encode_subscription(topics: list[str], user_data: bytes | None = None) -> bytes:
    """A v0 `ConsumerProtocolSubscription` (for tests and tools)."""
    parts = [_H.pack(0), _I.pack(len(topics))] + [_str(t) for t in topics]
    parts.append(b"\xff\xff\xff\xff" if user_data is None else _bytes(user_data))
    return b"".join(parts)


def encode_assignment(partitions: dict[str, list[int]], user_data: bytes | None = None) -> bytes:
    """A v0 `ConsumerProtocolAssignment` (for tests and tools)."""
    parts = [_H.pack(0), _I.pack(len(partitions))]
    for topic, ps in partitions.items():
        parts += [_str(topic), _I.pack(len(ps))] + [_I.pack(p) for p in ps]
    parts.append(b"\xff\xff\xff\xff" if user_data is None else _bytes(user_data))
    return b"".join(parts)
