"""The Produce request (API key 0, v3-v12) as the broker reads it, decoded by hand.

Why: kio's reader copies each partition's records field into a new `bytes` (a copy of
every produced byte, ~8 % of the broker's CPU at 1 KiB x 1 MiB requests, and with it
the structural pre-check of `protocol/guard.py` and kio's frozen entities). Here the
records field is a slice of the frame: a memoryview of the buffer the request was read
into when the listener handed a memoryview on (big frames, read in place), a `bytes`
slice of a small frame otherwise. A memoryview keeps the frame buffer exported, so the
listener's `BufferPool` cannot reuse it while a handler still holds the records: the
handler calls `drop_records` once every append is done, before it waits for the group
commit, so a request waiting on an fsync holds no buffer (with them held, over a quarter
of 1 MiB requests found no free buffer and paid for a fresh, zeroed one).

The objects carry kio's attribute names and value types (`timeout` a timedelta, the
records field's bytes equal to kio's), so the produce handlers read them unchanged;
fields are plain slotted attributes. Malformed input raises `ProduceDecodeError` where
`guard.check` or kio would refuse it: a length past the end of the body, a negative
length other than -1, a null where the schema does not allow one (topic_data, a topic's
name, partition_data), a string that is not UTF-8, a varint over 5 bytes. Tagged fields
(v9+; none is defined for these versions) are skipped, as Kafka's generated parsers skip
unknown tags (kio refused them: a newer client's request would have been dropped).
Trailing bytes after the body are left to the caller (`messages.decode`'s `strict`).
tests/unit/protocol/test_produce_request.py checks the result equals kio's for every
served version on random requests, and that garbled bodies fail in both or in neither.

Wire format (Kafka's ProduceRequest schema): TransactionalId nullable string, Acks
int16, TimeoutMs int32, TopicData [Name string, PartitionData [Index int32, Records
nullable records]]; v9+ is flexible (compact lengths as unsigned varints of length + 1,
0 meaning null, and a tagged-field section after each structure).
"""

# no `from __future__ import annotations`: the dataclasses' annotations are real types,
# as kio's, for the code that reads them (tests/unit/protocol/test_nulls.py)
import datetime
import struct
from dataclasses import dataclass

from tidegate.protocol.flexible import read_uvarint, skip_tagged_fields

__all__ = [
    "MAX_VERSION",
    "MIN_VERSION",
    "PartitionProduceData",
    "ProduceDecodeError",
    "ProduceRequest",
    "TopicProduceData",
    "decode",
    "drop_records",
]

API_KEY = 0
MIN_VERSION, MAX_VERSION = 3, 12
FIRST_FLEXIBLE = 9

Buffer = bytes | memoryview

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_MS = datetime.timedelta(milliseconds=1)


class ProduceDecodeError(ValueError):
    """The body is not a well-formed Produce request of the version given."""


@dataclass(slots=True)
class PartitionProduceData:
    index: int
    records: Buffer | None


@dataclass(slots=True)
class TopicProduceData:
    name: str
    partition_data: tuple[PartitionProduceData, ...]


@dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout: datetime.timedelta
    topic_data: tuple[TopicProduceData, ...]


def drop_records(request: object) -> None:
    """Forget the records of a request decoded here (its views of the frame), so that
    nothing it holds keeps the frame's buffer exported; other requests (kio's, whose
    records are `bytes`) are left as they are. The caller must not read them after."""
    if isinstance(request, ProduceRequest):
        for topic in request.topic_data:
            for part in topic.partition_data:
                part.records = None


def _length(buf: Buffer, pos: int, end: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """A length prefix (-1: null); `wide`: int32 when not flexible, else int16."""
    if flexible:
        n, pos = read_uvarint(buf, pos, end, ProduceDecodeError)
        n -= 1
    elif wide:
        if pos + 4 > end:
            raise ProduceDecodeError("truncated length")
        (n,) = _I32.unpack_from(buf, pos)
        pos += 4
    else:
        if pos + 2 > end:
            raise ProduceDecodeError("truncated length")
        (n,) = _I16.unpack_from(buf, pos)
        pos += 2
    if n < -1:
        raise ProduceDecodeError(f"negative length {n}")
    if n > end - pos:
        raise ProduceDecodeError(f"length {n} runs past the end ({end - pos} bytes left)")
    return n, pos


def _string(buf: Buffer, pos: int, end: int, flexible: bool, what: str,
            nullable: bool) -> tuple[str | None, int]:
    n, pos = _length(buf, pos, end, flexible, False)
    if n == -1:
        if not nullable:
            raise ProduceDecodeError(f"non-nullable field {what} was serialized as null")
        return None, pos
    try:
        return str(buf[pos : pos + n], "utf-8"), pos + n
    except UnicodeDecodeError as e:
        raise ProduceDecodeError(f"{what} is not UTF-8: {e}") from None


def _count(buf: Buffer, pos: int, end: int, flexible: bool, what: str) -> tuple[int, int]:
    n, pos = _length(buf, pos, end, flexible, True)
    if n == -1:
        raise ProduceDecodeError(f"non-nullable field {what} was serialized as null")
    return n, pos


def decode(buf: Buffer, pos: int, version: int) -> tuple[ProduceRequest, int]:
    """The request whose body starts at `pos`, and the position after it."""
    end = len(buf)
    flexible = version >= FIRST_FLEXIBLE
    txn_id, pos = _string(buf, pos, end, flexible, "transactional_id", True)
    if pos + 6 > end:
        raise ProduceDecodeError("truncated acks/timeout")
    acks, timeout = _ACKS_TIMEOUT.unpack_from(buf, pos)
    pos += 6
    n_topics, pos = _count(buf, pos, end, flexible, "topic_data")
    topics = []
    for _ in range(n_topics):
        name, pos = _string(buf, pos, end, flexible, "name", False)
        n_parts, pos = _count(buf, pos, end, flexible, "partition_data")
        parts = []
        for _ in range(n_parts):
            if pos + 4 > end:
                raise ProduceDecodeError("truncated partition index")
            (index,) = _I32.unpack_from(buf, pos)
            pos += 4
            # a flexible length of one or two bytes (records under 16 KiB) and an empty
            # tag section, the usual case, are read inline; the rest by `_length` and
            # `skip_tagged_fields` (two calls more per partition)
            b = buf[pos] if flexible and pos + 1 < end else 0x80
            if b < 0x80:
                n = b - 1
                pos += 1
            elif flexible and pos + 1 < end and buf[pos + 1] < 0x80:
                n = ((b & 0x7F) | buf[pos + 1] << 7) - 1
                pos += 2
            else:
                n, pos = _length(buf, pos, end, flexible, True)
            if n > end - pos:
                raise ProduceDecodeError(f"length {n} runs past the end ({end - pos} bytes left)")
            records: Buffer | None = None
            if n >= 0:
                records = buf[pos : pos + n]
                pos += n
            if flexible:
                if pos < end and not buf[pos]:
                    pos += 1
                else:
                    pos = skip_tagged_fields(buf, pos, end, ProduceDecodeError)
            parts.append(PartitionProduceData(index, records))
        if flexible:
            pos = skip_tagged_fields(buf, pos, end, ProduceDecodeError)
        topics.append(TopicProduceData(name or "", tuple(parts)))
    if flexible:
        pos = skip_tagged_fields(buf, pos, end, ProduceDecodeError)
    return ProduceRequest(txn_id, acks, timeout * _MS, tuple(topics)), pos
