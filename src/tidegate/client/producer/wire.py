"""The Produce request body, encoded straight from the drained batches.

`encode_produce` writes what `protocol.messages` would build and encode from the same
fields (byte for byte; tests/unit/client/test_produce_wire.py checks every version
the client speaks), but as a list of parts in which each batch's bytes appear as they
are: the connection writes the parts without copying the batches into one body first.
The generic path copies a request's records several times (entity, encoder buffer,
header, frame), which for large batches costs more than encoding everything else.

Versions 3-13: v3+ start with ``transactional_id``; v9+ are flexible (compact strings,
arrays and bytes, and an empty tagged-field section after each structure); v13 names
topics by id instead of by name.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence

from tidegate.records.varint import encode_uvarint as _uvarint

__all__ = ["MAX_VERSION", "MIN_VERSION", "encode_produce"]

MIN_VERSION = 3
MAX_VERSION = 13
FLEXIBLE_FROM = 9
TOPIC_IDS_FROM = 13

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_NO_TAGS = b"\x00"

# (partition index, built batch bytes)
PartitionData = tuple[int, bytes]
# (topic name, topic id, partitions)
TopicData = tuple[str, uuid.UUID, Sequence[PartitionData]]


def encode_produce(version: int, acks: int, timeout_ms: int, topics: Sequence[TopicData],
                   transactional_id: str | None = None) -> list[bytes]:
    """The body of a Produce request at `version`, as parts to write in order."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce v{version} is not encoded here (v{MIN_VERSION}-"
                         f"v{MAX_VERSION})")
    flexible = version >= FLEXIBLE_FROM
    by_id = version >= TOPIC_IDS_FROM
    parts: list[bytes] = []
    head = bytearray()
    tid = None if transactional_id is None else transactional_id.encode("utf-8")
    if flexible:
        head += _uvarint(0 if tid is None else len(tid) + 1)
    else:
        head += _I16.pack(-1 if tid is None else len(tid))
    if tid is not None:
        head += tid
    head += _ACKS_TIMEOUT.pack(acks, timeout_ms)
    head += _uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    for name, topic_id, partitions in topics:
        if by_id:
            head += topic_id.bytes
        else:
            raw = name.encode("utf-8")
            head += _uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))
            head += raw
        head += _uvarint(len(partitions) + 1) if flexible else _I32.pack(len(partitions))
        for index, records in partitions:
            head += _I32.pack(index)
            head += _uvarint(len(records) + 1) if flexible else _I32.pack(len(records))
            parts.append(bytes(head))
            parts.append(records)
            head = bytearray(_NO_TAGS) if flexible else bytearray()  # partition's tags
        if flexible:
            head += _NO_TAGS  # topic's tagged fields
    if flexible:
        head += _NO_TAGS  # the request's tagged fields
    if head:
        parts.append(bytes(head))
    return parts
