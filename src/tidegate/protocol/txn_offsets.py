"""AddOffsetsToTxn (API key 25, v0-v4) and TxnOffsetCommit (28, v0-v5) by hand: the
requests decoded, the responses encoded.

Why: a transaction that commits consumer offsets (consume-transform-produce,
`send_offsets_to_transaction`) sends both on every commit, beside AddPartitionsToTxn
and EndTxn (txn_requests.py, txn_responses.py). As for those, kio's reader is fast but
`guard.check`'s schema walk before it is Python, and building kio's frozen entities for
the response (`messages.build`) and kio's generic writer cost most (docs/benchmarks.md,
"Transactional clients").

Requests: slotted dataclasses with kio's attribute names and plain values; a field a
version lacks holds its schema default (TxnOffsetCommit `generation_id` -1, `member_id`
"", `group_instance_id` None before v3; `committed_leader_epoch` -1 before v2).
Malformed input raises `TxnDecodeError` where `guard.check` or kio would refuse it (the
rules of txn_requests.py; here `group_instance_id` and `committed_metadata` may be
null, every other string and array may not). Unknown tagged fields are skipped, as
Kafka's parsers do. `messages.decode` picks these decoders through `decoders()`.

Responses: as txn_responses.py, only the broker's encoding is hand-written (clients
decode with kio); `add_offsets_response` / `txn_offset_commit_response` build them,
`encode_body` writes them and `error_counts` gives the request metrics the codes kio's
fields would. tests/unit/protocol/test_txn_offsets.py checks values and bytes against
kio for every served version.

Wire format (Kafka's schemas): AddOffsetsToTxn request: TransactionalId string,
ProducerId int64, ProducerEpoch int16, GroupId string; response: ThrottleTimeMs int32,
ErrorCode int16. TxnOffsetCommit request: TransactionalId string, GroupId string,
ProducerId int64, ProducerEpoch int16, (v3+) GenerationId int32, MemberId string,
GroupInstanceId nullable string, Topics [Name string, Partitions [PartitionIndex int32,
CommittedOffset int64, (v2+) CommittedLeaderEpoch int32, CommittedMetadata nullable
string]]; response: ThrottleTimeMs int32, Topics [Name string, Partitions
[PartitionIndex int32, ErrorCode int16]]. v3+ are flexible.
"""

# no `from __future__ import annotations`: the dataclasses' annotations are real types,
# as kio's, for the code that reads them (tests/unit/protocol/test_nulls.py)
import datetime
import struct
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from kio.static.primitive import i16

from tidegate.protocol.flexible import array_length, read_uvarint, string
from tidegate.protocol.hand_written import HandWrittenMessage

# the readers AddPartitionsToTxn and EndTxn use: one set of rules for refusing a body
from tidegate.protocol.txn_requests import (
    Buffer,
    Decoder,
    TxnDecodeError,
    _length,
    _string,
    _tags,
)

__all__ = [
    "ADD_OFFSETS_KEY",
    "TXN_OFFSET_COMMIT_KEY",
    "AddOffsetsToTxnRequest",
    "AddOffsetsToTxnResponse",
    "TxnDecodeError",
    "TxnOffsetCommitPartition",
    "TxnOffsetCommitPartitionResult",
    "TxnOffsetCommitRequest",
    "TxnOffsetCommitResponse",
    "TxnOffsetCommitTopic",
    "TxnOffsetCommitTopicResult",
    "add_offsets_response",
    "decode_add_offsets",
    "decode_txn_offset_commit",
    "decoders",
    "txn_offset_commit_response",
]

ADD_OFFSETS_KEY, TXN_OFFSET_COMMIT_KEY = 25, 28
# the versions the broker serves (server/dispatch.py)
VERSIONS = {ADD_OFFSETS_KEY: (0, 4), TXN_OFFSET_COMMIT_KEY: (0, 5)}
FIRST_FLEXIBLE = 3
FIRST_LEADER_EPOCH = 2  # TxnOffsetCommit: CommittedLeaderEpoch
FIRST_MEMBER = 3  # TxnOffsetCommit: GenerationId, MemberId, GroupInstanceId (KIP-447)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I32_I16 = struct.Struct(">ih")
_PID_EPOCH = struct.Struct(">qh")
_PART = struct.Struct(">iq")
_PART_EPOCH = struct.Struct(">iqi")
_RESULT = struct.Struct(">ih")
_RESULT_FLEX = struct.Struct(">ihB")  # with the empty tagged-field section
_MS = datetime.timedelta(milliseconds=1)


@dataclass(slots=True)
class AddOffsetsToTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


@dataclass(slots=True)
class TxnOffsetCommitPartition:
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int
    committed_metadata: str | None


@dataclass(slots=True)
class TxnOffsetCommitTopic:
    name: str
    partitions: tuple[TxnOffsetCommitPartition, ...]


@dataclass(slots=True)
class TxnOffsetCommitRequest:
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    group_instance_id: str | None
    topics: tuple[TxnOffsetCommitTopic, ...]


def _nullable_string(buf: Buffer, pos: int, end: int, flexible: bool, what: str
                     ) -> tuple[str | None, int]:
    if flexible:
        if pos < end and buf[pos] < 0x80:  # a one-byte varint, the usual case
            n, after = buf[pos] - 1, pos + 1
        else:
            n, after = read_uvarint(buf, pos, end, TxnDecodeError)
            n -= 1
        if n == -1:  # compact length 0: null
            return None, after
    elif pos + 2 <= end and _I16.unpack_from(buf, pos)[0] == -1:
        return None, pos + 2
    return _string(buf, pos, end, flexible, what)  # refuses any other negative length


def decode_add_offsets(buf: Buffer, pos: int, version: int
                       ) -> tuple[AddOffsetsToTxnRequest, int]:
    """The request whose body starts at `pos`, and the position after it."""
    end = len(buf)
    flexible = version >= FIRST_FLEXIBLE
    txn_id, pos = _string(buf, pos, end, flexible, "transactional_id")
    if pos + 10 > end:
        raise TxnDecodeError("truncated producer id/epoch")
    pid, epoch = _PID_EPOCH.unpack_from(buf, pos)
    group_id, pos = _string(buf, pos + 10, end, flexible, "group_id")
    if flexible:
        pos = _tags(buf, pos, end)
    return AddOffsetsToTxnRequest(txn_id, pid, epoch, group_id), pos


def decode_txn_offset_commit(buf: Buffer, pos: int, version: int
                             ) -> tuple[TxnOffsetCommitRequest, int]:
    """The request whose body starts at `pos`, and the position after it."""
    end = len(buf)
    flexible = version >= FIRST_FLEXIBLE
    txn_id, pos = _string(buf, pos, end, flexible, "transactional_id")
    group_id, pos = _string(buf, pos, end, flexible, "group_id")
    if pos + 10 > end:
        raise TxnDecodeError("truncated producer id/epoch")
    pid, epoch = _PID_EPOCH.unpack_from(buf, pos)
    pos += 10
    generation, member, instance = -1, "", None
    if version >= FIRST_MEMBER:
        if pos + 4 > end:
            raise TxnDecodeError("truncated generation id")
        (generation,) = _I32.unpack_from(buf, pos)
        member, pos = _string(buf, pos + 4, end, flexible, "member_id")
        instance, pos = _nullable_string(buf, pos, end, flexible, "group_instance_id")
    with_epoch = version >= FIRST_LEADER_EPOCH
    part = _PART_EPOCH if with_epoch else _PART
    n_topics, pos = _length(buf, pos, end, flexible, True, "topics")
    topics = []
    for _ in range(n_topics):
        name, pos = _string(buf, pos, end, flexible, "name")
        n_parts, pos = _length(buf, pos, end, flexible, True, "partitions")
        parts = []
        for _ in range(n_parts):
            if pos + part.size > end:
                raise TxnDecodeError("truncated partition")
            if with_epoch:
                index, offset, leader_epoch = part.unpack_from(buf, pos)
            else:
                (index, offset), leader_epoch = part.unpack_from(buf, pos), -1
            metadata, pos = _nullable_string(buf, pos + part.size, end, flexible,
                                             "committed_metadata")
            if flexible:
                pos = _tags(buf, pos, end)
            parts.append(TxnOffsetCommitPartition(index, offset, leader_epoch, metadata))
        if flexible:
            pos = _tags(buf, pos, end)
        topics.append(TxnOffsetCommitTopic(name, tuple(parts)))
    if flexible:
        pos = _tags(buf, pos, end)
    return TxnOffsetCommitRequest(txn_id, group_id, pid, epoch, generation, member,
                                  instance, tuple(topics)), pos


def decoders() -> dict[int, tuple[Decoder, int, int]]:
    """The hand decoder of each API key this module reads, with its served versions."""
    return {ADD_OFFSETS_KEY: (decode_add_offsets, *VERSIONS[ADD_OFFSETS_KEY]),
            TXN_OFFSET_COMMIT_KEY: (decode_txn_offset_commit,
                                    *VERSIONS[TXN_OFFSET_COMMIT_KEY])}


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxnResponse(HandWrittenMessage):
    throttle_time: datetime.timedelta = datetime.timedelta(0)
    error_code: ErrorCode = ErrorCode.none

    __type__ = EntityType.response
    __api_key__ = i16(ADD_OFFSETS_KEY)

    def error_counts(self, counts: dict[int, int]) -> None:
        code = int(self.error_code)
        counts[code] = counts.get(code, 0) + 1

    def encode_body(self) -> bytes:
        body = _I32_I16.pack(int(self.throttle_time / _MS), self.error_code)
        return body + b"\x00" if self.__flexible__ else body


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitPartitionResult:
    partition_index: int
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitTopicResult:
    name: str
    partitions: tuple[TxnOffsetCommitPartitionResult, ...]


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitResponse(HandWrittenMessage):
    throttle_time: datetime.timedelta = datetime.timedelta(0)
    topics: tuple[TxnOffsetCommitTopicResult, ...] = ()

    __type__ = EntityType.response
    __api_key__ = i16(TXN_OFFSET_COMMIT_KEY)

    def error_counts(self, counts: dict[int, int]) -> None:
        for t in self.topics:
            for p in t.partitions:
                code = int(p.error_code)
                counts[code] = counts.get(code, 0) + 1

    def encode_body(self) -> bytes:
        flexible = self.__flexible__
        out = [_I32.pack(int(self.throttle_time / _MS)),
               array_length(len(self.topics), flexible)]
        for t in self.topics:
            out.append(string(t.name, flexible))
            out.append(array_length(len(t.partitions), flexible))
            if flexible:
                out.extend(_RESULT_FLEX.pack(p.partition_index, p.error_code, 0)
                           for p in t.partitions)
                out.append(b"\x00")
            else:
                out.extend(_RESULT.pack(p.partition_index, p.error_code)
                           for p in t.partitions)
        if flexible:
            out.append(b"\x00")
        return b"".join(out)


def _version_classes(base: type[HandWrittenMessage], name: str, key: int
                     ) -> dict[int, type]:
    # one class per version, as kio has: the version and flexibility are class attributes
    lo, hi = VERSIONS[key]
    return {v: type(f"{name}V{v}", (base,), {
        "__slots__": (), "__version__": i16(v), "__flexible__": v >= FIRST_FLEXIBLE})
        for v in range(lo, hi + 1)}


_ADD = _version_classes(AddOffsetsToTxnResponse, "AddOffsetsToTxnResponse", ADD_OFFSETS_KEY)
_COMMIT = _version_classes(TxnOffsetCommitResponse, "TxnOffsetCommitResponse",
                           TXN_OFFSET_COMMIT_KEY)


def add_offsets_response(version: int, **fields: object) -> AddOffsetsToTxnResponse:
    """The response of a served version (KeyError for any other)."""
    return _ADD[version](**fields)  # type: ignore[no-any-return]


def txn_offset_commit_response(version: int, **fields: object) -> TxnOffsetCommitResponse:
    return _COMMIT[version](**fields)  # type: ignore[no-any-return]
