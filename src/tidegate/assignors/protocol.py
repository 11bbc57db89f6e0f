"""The consumer protocol's bytes: ConsumerProtocolSubscription and -Assignment v0-v3.

These are the opaque ``metadata`` of a JoinGroup protocol entry (the subscription) and
the ``assignment`` bytes of SyncGroup, for groups with protocol type ``"consumer"``.
Every client (Java, librdkafka, kafka-python, ...) reads and writes them, so the
layouts follow Kafka's ConsumerProtocolSubscription.json / ConsumerProtocolAssignment.json
exactly. They are legacy, non-flexible encodings: an int16 version, then the fields
with int16-length strings, int32-length bytes (-1: null) and int32-count arrays.

Subscription: topics [string]; user_data nullable bytes; v1+ owned_partitions
[(topic string, partitions [int32])]; v2+ generation_id int32 (default -1); v3+
rack_id nullable string. Assignment (all versions): assigned_partitions
[(topic, [int32])]; user_data nullable bytes.

Decoding follows Kafka's compatibility rule: a version newer than we know is read
with the newest layout we know and trailing bytes are ignored. Empty input decodes as
an empty subscription/assignment (a coordinator sends empty assignment bytes to a
member the leader left out). Malformed input raises `ConsumerProtocolError`.

`Writer` and `Reader` are the primitive codecs, shared with the sticky assignor's
own user-data format.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from tidegate.assignors.types import Assignment, Subscription, TopicPartition, group_by_topic

__all__ = [
    "ASSIGNMENT_VERSION",
    "CONSUMER_PROTOCOL_TYPE",
    "SUBSCRIPTION_VERSION",
    "ConsumerProtocolError",
    "Reader",
    "Writer",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "subscription_version",
]

CONSUMER_PROTOCOL_TYPE = "consumer"
SUBSCRIPTION_VERSION = 3  # the newest layout we know, and the one we send
ASSIGNMENT_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ConsumerProtocolError(ValueError):
    """Consumer-protocol bytes that do not decode."""


class Writer:
    """Appends big-endian primitives to a buffer."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def int16(self, v: int) -> Writer:
        self.buf += _I16.pack(v)
        return self

    def int32(self, v: int) -> Writer:
        self.buf += _I32.pack(v)
        return self

    def string(self, s: str | None) -> Writer:
        if s is None:
            return self.int16(-1)
        raw = s.encode()
        if len(raw) > 32767:
            raise ConsumerProtocolError(f"string of {len(raw)} bytes is too long to encode")
        self.int16(len(raw))
        self.buf += raw
        return self

    def bytes_(self, b: bytes | None) -> Writer:
        if b is None:
            return self.int32(-1)
        self.int32(len(b))
        self.buf += b
        return self

    def topic_partitions(self, partitions: Iterable[tuple[str, int]]) -> Writer:
        """``[(topic string, partitions [int32])]``, sorted by topic and partition."""
        grouped = group_by_topic(partitions)
        self.int32(len(grouped))
        for topic, ps in grouped:
            self.string(topic)
            self.int32(len(ps))
            for p in ps:
                self.int32(p)
        return self

    def getvalue(self) -> bytes:
        return bytes(self.buf)


class Reader:
    """Reads big-endian primitives; `ConsumerProtocolError` on truncation."""

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.data = bytes(data)
        self.pos = 0

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ConsumerProtocolError(
                f"truncated: wanted {n} bytes at offset {self.pos} of {len(self.data)}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        try:
            return self._take(n).decode()
        except UnicodeDecodeError as e:
            raise ConsumerProtocolError(f"string is not UTF-8: {e}") from e

    def required_string(self) -> str:
        s = self.string()
        if s is None:
            raise ConsumerProtocolError(f"null string at offset {self.pos - 2}")
        return s

    def bytes_(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else self._take(n)

    def count(self) -> int:
        """An array length; null (-1) reads as empty. Bounded by the bytes left, so
        a corrupt count cannot make us allocate or loop for long."""
        n = self.int32()
        if n > self.remaining:
            raise ConsumerProtocolError(f"array of {n} entries in {self.remaining} bytes")
        return max(n, 0)

    def topic_partitions(self) -> list[TopicPartition]:
        out: list[TopicPartition] = []
        for _ in range(self.count()):
            topic = self.required_string()
            for _ in range(self.count()):
                out.append(TopicPartition(topic, self.int32()))
        return out


def encode_subscription(sub: Subscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    """The JoinGroup metadata bytes of `sub` at `version` (0-3); fields the version
    lacks are left out."""
    if not 0 <= version <= SUBSCRIPTION_VERSION:
        raise ValueError(f"ConsumerProtocolSubscription version {version} is not 0-3")
    w = Writer().int16(version)
    w.int32(len(sub.topics))
    for topic in sub.topics:
        w.string(topic)
    w.bytes_(sub.user_data)
    if version >= 1:
        w.topic_partitions(sub.owned_partitions)
    if version >= 2:
        w.int32(sub.generation_id)
    if version >= 3:
        w.string(sub.rack)
    return w.getvalue()


def subscription_version(data: bytes) -> int:
    """The version a subscription was encoded with."""
    return Reader(data).int16()


def decode_subscription(data: bytes, *, member_id: str = "",
                        group_instance_id: str | None = None) -> Subscription:
    """Decode JoinGroup member metadata (see the module docstring)."""
    if not data:
        return Subscription((), member_id=member_id, group_instance_id=group_instance_id)
    r = Reader(data)
    version = r.int16()
    if version < 0:
        raise ConsumerProtocolError(f"negative ConsumerProtocolSubscription version {version}")
    topics = tuple(r.required_string() for _ in range(r.count()))
    user_data = r.bytes_()
    owned = r.topic_partitions() if version >= 1 else []
    generation = r.int32() if version >= 2 else -1
    rack = r.string() if version >= 3 else None
    return Subscription(topics, user_data, tuple(owned), generation, group_instance_id,
                        rack, member_id)


def encode_assignment(assignment: Assignment, version: int = ASSIGNMENT_VERSION) -> bytes:
    """The SyncGroup assignment bytes of `assignment` (the layout is the same in
    every version; only the version number differs)."""
    if not 0 <= version <= ASSIGNMENT_VERSION:
        raise ValueError(f"ConsumerProtocolAssignment version {version} is not 0-3")
    w = Writer().int16(version)
    w.topic_partitions(assignment.partitions)
    w.bytes_(assignment.user_data)
    return w.getvalue()


def decode_assignment(data: bytes) -> Assignment:
    """Decode SyncGroup assignment bytes (see the module docstring)."""
    if not data:
        return Assignment()
    r = Reader(data)
    version = r.int16()
    if version < 0:
        raise ConsumerProtocolError(f"negative ConsumerProtocolAssignment version {version}")
    partitions = r.topic_partitions()
    user_data = r.bytes_()
    return Assignment(tuple(partitions), user_data)
