"""The AddPartitionsToTxn (API key 24) and EndTxn (26) responses, v0-v5, encoded by hand.

Why: a one-record transaction gets both once per commit; building kio's frozen entities
(`messages.build`) and kio's generic writer cost about 24 and 6 us; these plain objects
and a few `struct.pack`s cost a few us (docs/benchmarks.md, "One-record transactions").

As protocol/produce_response.py: only the broker's encoding is hand-written (clients and
tests decode these responses with kio, so the classes are not registered in
`hand_written.RESPONSES`); the handlers build them with `add_partitions_response` /
`end_txn_response`, `messages.encode` writes any `HandWrittenMessage` with its
`encode_body`, and `error_counts` gives the request metrics the codes kio's fields would
(AddPartitionsToTxn: the top-level code from v4, and each partition's). The attribute
names are kio's (`quotas.throttle.with_throttle` replaces `throttle_time`).
tests/unit/protocol/test_txn_responses.py checks the bytes equal kio's for every served
version on random responses.

Wire format (Kafka's schemas): AddPartitionsToTxn: ThrottleTimeMs int32, ErrorCode int16
(v4+), ResultsByTransaction [TransactionalId string, TopicResults [...]] (v4+) or
ResultsByTopicV3AndBelow [...] (v0-v3), each topic result [Name string,
ResultsByPartition [PartitionIndex int32, PartitionErrorCode int16]]. EndTxn:
ThrottleTimeMs int32, ErrorCode int16, ProducerId int64 and ProducerEpoch int16 (v5+).
v3+ are flexible (compact strings and arrays, a tagged-field section after each
structure).
"""

from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from kio.static.primitive import i16

from tidegate.protocol.flexible import array_length, string
from tidegate.protocol.hand_written import HandWrittenMessage

__all__ = [
    "AddPartitionsToTxnPartitionResult",
    "AddPartitionsToTxnResponse",
    "AddPartitionsToTxnResult",
    "AddPartitionsToTxnTopicResult",
    "EndTxnResponse",
    "add_partitions_response",
    "end_txn_response",
]

ADD_PARTITIONS_KEY, END_TXN_KEY = 24, 26
MIN_VERSION, MAX_VERSION = 0, 5
FIRST_FLEXIBLE = 3

_I32 = struct.Struct(">i")
_I32_I16 = struct.Struct(">ih")
_PART = struct.Struct(">ih")
_PART_FLEX = struct.Struct(">ihB")  # with the empty tagged-field section
_END_V5 = struct.Struct(">ihqh")
_MS = datetime.timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnPartitionResult:
    partition_index: int
    partition_error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnTopicResult:
    name: str
    results_by_partition: tuple[AddPartitionsToTxnPartitionResult, ...]


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnResult:
    transactional_id: str
    topic_results: tuple[AddPartitionsToTxnTopicResult, ...]


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnResponse(HandWrittenMessage):
    """v0-v3 write `results_by_topic_v3_and_below`; v4+ `error_code` and
    `results_by_transaction`."""

    throttle_time: datetime.timedelta = datetime.timedelta(0)
    error_code: ErrorCode = ErrorCode.none
    results_by_transaction: tuple[AddPartitionsToTxnResult, ...] = ()
    results_by_topic_v3_and_below: tuple[AddPartitionsToTxnTopicResult, ...] = ()

    __type__ = EntityType.response
    __api_key__ = i16(ADD_PARTITIONS_KEY)

    def error_counts(self, counts: dict[int, int]) -> None:
        if self.__version__ >= 4:
            code = int(self.error_code)
            counts[code] = counts.get(code, 0) + 1
            topics = [t for r in self.results_by_transaction for t in r.topic_results]
        else:
            topics = list(self.results_by_topic_v3_and_below)
        for t in topics:
            for p in t.results_by_partition:
                code = int(p.partition_error_code)
                counts[code] = counts.get(code, 0) + 1

    def encode_body(self) -> bytes:
        flexible = self.__flexible__
        throttle = int(self.throttle_time / _MS)
        if self.__version__ < 4:
            out = [_I32.pack(throttle)]
            _topic_results(out, self.results_by_topic_v3_and_below, flexible)
        else:
            out = [_I32_I16.pack(throttle, self.error_code),
                   array_length(len(self.results_by_transaction), True)]
            for r in self.results_by_transaction:
                out.append(string(r.transactional_id, True))
                _topic_results(out, r.topic_results, True)
                out.append(b"\x00")
        if flexible:
            out.append(b"\x00")
        return b"".join(out)


@dataclass(frozen=True, slots=True)
class EndTxnResponse(HandWrittenMessage):
    throttle_time: datetime.timedelta = datetime.timedelta(0)
    error_code: ErrorCode = ErrorCode.none
    producer_id: int = -1  # v5+
    producer_epoch: int = -1  # v5+

    __type__ = EntityType.response
    __api_key__ = i16(END_TXN_KEY)

    def error_counts(self, counts: dict[int, int]) -> None:
        code = int(self.error_code)
        counts[code] = counts.get(code, 0) + 1

    def encode_body(self) -> bytes:
        throttle = int(self.throttle_time / _MS)
        if self.__version__ >= 5:
            body = _END_V5.pack(throttle, self.error_code, self.producer_id,
                                self.producer_epoch)
        else:
            body = _I32_I16.pack(throttle, self.error_code)
        return body + b"\x00" if self.__flexible__ else body


def _topic_results(out: list[bytes], topics: tuple[AddPartitionsToTxnTopicResult, ...],
                   flexible: bool) -> None:
    out.append(array_length(len(topics), flexible))
    part = _PART_FLEX if flexible else _PART
    for t in topics:
        out.append(string(t.name, flexible))
        parts = t.results_by_partition
        out.append(array_length(len(parts), flexible))
        if flexible:
            out.extend(part.pack(p.partition_index, p.partition_error_code, 0) for p in parts)
            out.append(b"\x00")
        else:
            out.extend(part.pack(p.partition_index, p.partition_error_code) for p in parts)


def _version_classes(base: type[HandWrittenMessage], name: str) -> dict[int, type]:
    # one class per version, as kio has: the version and flexibility are class attributes
    return {v: type(f"{name}V{v}", (base,), {
        "__slots__": (), "__version__": i16(v), "__flexible__": v >= FIRST_FLEXIBLE})
        for v in range(MIN_VERSION, MAX_VERSION + 1)}


_ADD = _version_classes(AddPartitionsToTxnResponse, "AddPartitionsToTxnResponse")
_END = _version_classes(EndTxnResponse, "EndTxnResponse")


def add_partitions_response(version: int, **fields: object) -> AddPartitionsToTxnResponse:
    """The response of a served version (KeyError for any other)."""
    return _ADD[version](**fields)  # type: ignore[no-any-return]


def end_txn_response(version: int, **fields: object) -> EndTxnResponse:
    return _END[version](**fields)  # type: ignore[no-any-return]
