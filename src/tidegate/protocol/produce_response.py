"""The Produce response (API key 0, v3-v12) the broker sends, encoded by hand.

Why: a producer spreading records over many partitions sends one small batch per
partition per request, so the response has an entry per partition. Building kio's
frozen entities for it (`messages.build`, one per partition) and kio's generic writer
cost about 5 + 6 us per partition, more than the append of a 1 KiB batch; these plain
objects and one `struct.pack` per partition cost well under 1 us (docs/benchmarks.md,
"Durable produce").

Only the broker's encoding is hand-written: decoding Produce responses (the client,
tests) stays kio's, so these classes are not registered in `hand_written.RESPONSES`;
the produce handler builds them directly, and `messages.encode` writes any
`HandWrittenMessage` with its `encode_body`. The attribute names are kio's, so code that
reads a response (tests, `quotas.throttle.with_throttle`'s `dataclasses.replace` of
`throttle_time`) needs no special case; times are plain milliseconds, not datetimes.

Wire format (Kafka's ProduceResponse schema): Responses [Name string, PartitionResponses
[Index int32, ErrorCode int16, BaseOffset int64, LogAppendTimeMs int64, LogStartOffset
int64 (v5+), RecordErrors [BatchIndex int32, BatchIndexErrorMessage nullable string]
(v8+), ErrorMessage nullable string (v8+)]], ThrottleTimeMs int32; v9+ is flexible
(compact strings and arrays, a tagged-field section after each structure). The tagged
fields of v10+ (CurrentLeader, NodeEndpoints: KIP-951's leader hints) are not modelled:
the broker never sets them, and kio writes nothing for a tagged field at its default.
tests/unit/protocol/test_produce_response.py checks the bytes equal kio's for every
served version on random responses.
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
    "MAX_VERSION",
    "MIN_VERSION",
    "PartitionProduceResponse",
    "ProduceResponse",
    "RecordError",
    "TopicProduceResponse",
    "response_class",
]

API_KEY = 0
MIN_VERSION, MAX_VERSION = 3, 12
FIRST_FLEXIBLE = 9

_I32 = struct.Struct(">i")
# a partition's fixed fields: index, error, base offset, log append time (+ start offset)
_HEAD_V3 = struct.Struct(">ihqq")
_HEAD_V5 = struct.Struct(">ihqqq")
# v8+ with no record errors and no message, the common case, in one pack: the empty
# record-error array and null message (v8: int32 0, int16 -1; v9+: compact 1, 0, and
# the empty tagged-field section)
_OK_V8 = struct.Struct(">ihqqqih")
_OK_V9 = struct.Struct(">ihqqqBBB")


@dataclass(frozen=True, slots=True)
class RecordError:
    """A record that made its batch be refused (v8+): its index in the batch."""

    batch_index: int
    batch_index_error_message: str | None = None


class PartitionProduceResponse:
    """One partition's answer. Mutable: the handler sets the error of a partition whose
    wait for durability failed after the append answered it."""

    __slots__ = ("base_offset", "error_code", "error_message", "index", "log_append_time",
                 "log_start_offset", "record_errors")

    def __init__(self, index: int, error_code: ErrorCode = ErrorCode.none,
                 error_message: str | None = None, base_offset: int = -1,
                 log_append_time: int = -1, log_start_offset: int = -1,
                 record_errors: tuple[RecordError, ...] = ()) -> None:
        self.index = index
        self.error_code = error_code
        self.error_message = error_message
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset
        self.record_errors = record_errors

    def __repr__(self) -> str:
        return (f"PartitionProduceResponse(index={self.index}, error_code={self.error_code!r}"
                f", base_offset={self.base_offset}, error_message={self.error_message!r})")


@dataclass(frozen=True, slots=True)
class TopicProduceResponse:
    name: str
    partition_responses: tuple[PartitionProduceResponse, ...]


@dataclass(frozen=True, slots=True)
class ProduceResponse(HandWrittenMessage):
    responses: tuple[TopicProduceResponse, ...]
    throttle_time: datetime.timedelta = datetime.timedelta(0)

    __type__ = EntityType.response
    __api_key__ = i16(API_KEY)

    def error_counts(self, counts: dict[int, int]) -> None:
        """Add each partition's error code to `counts` (Kafka's errorCounts: NONE
        included), as the request metrics count kio responses' error_code fields."""
        for topic in self.responses:
            for p in topic.partition_responses:
                code = int(p.error_code)
                counts[code] = counts.get(code, 0) + 1

    def encode_body(self) -> bytes:
        version = int(self.__version__)
        flexible = self.__flexible__
        out: list[bytes] = [array_length(len(self.responses), flexible)]
        append = out.append
        for topic in self.responses:
            append(string(topic.name, flexible))
            parts = topic.partition_responses
            append(array_length(len(parts), flexible))
            if version >= 8:
                ok = _OK_V9 if flexible else _OK_V8
                tail = (1, 0, 0) if flexible else (0, -1)
                for p in parts:
                    if not p.record_errors and p.error_message is None:
                        append(ok.pack(p.index, p.error_code, p.base_offset,
                                       p.log_append_time, p.log_start_offset, *tail))
                    else:
                        append(_HEAD_V5.pack(p.index, p.error_code, p.base_offset,
                                             p.log_append_time, p.log_start_offset))
                        append(_errors(p, flexible))
            elif version >= 5:
                for p in parts:
                    append(_HEAD_V5.pack(p.index, p.error_code, p.base_offset,
                                         p.log_append_time, p.log_start_offset))
            else:
                for p in parts:
                    append(_HEAD_V3.pack(p.index, p.error_code, p.base_offset,
                                         p.log_append_time))
            if flexible:
                append(b"\x00")  # the topic's tagged fields
        append(_I32.pack(int(self.throttle_time / datetime.timedelta(milliseconds=1))))
        if flexible:
            append(b"\x00")
        return b"".join(out)


def _nullable_string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else b"\xff\xff"
    return string(s, flexible)


def _errors(p: PartitionProduceResponse, flexible: bool) -> bytes:
    """RecordErrors, ErrorMessage and (flexible) the partition's tagged fields."""
    out = [array_length(len(p.record_errors), flexible)]
    for e in p.record_errors:
        out.append(_I32.pack(e.batch_index))
        out.append(_nullable_string(e.batch_index_error_message, flexible))
        if flexible:
            out.append(b"\x00")
    out.append(_nullable_string(p.error_message, flexible))
    if flexible:
        out.append(b"\x00")
    return b"".join(out)


def _version_class(version: int) -> type[ProduceResponse]:
    # one class per version, as kio has: the version and flexibility are class attributes
    return type(f"ProduceResponseV{version}", (ProduceResponse,), {
        "__slots__": (), "__version__": i16(version),
        "__flexible__": version >= FIRST_FLEXIBLE})


_CLASSES = {v: _version_class(v) for v in range(MIN_VERSION, MAX_VERSION + 1)}


def response_class(version: int) -> type[ProduceResponse]:
    """The response class of a served version (KeyError for any other)."""
    return _CLASSES[version]
