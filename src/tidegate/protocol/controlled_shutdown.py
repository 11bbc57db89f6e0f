"""ControlledShutdown (API key 7), hand-written: kio does not ship it.

A ZooKeeper-mode broker sends it to the controller when it is asked to stop
(`controlled.shutdown.enable`): the controller moves the broker's leaderships to other
in-sync replicas, takes it out of the ISR of the partitions it follows, and answers
with the partitions it still leads (those it could not move).

Wire format, from Kafka's ControlledShutdownRequest/Response schemas:

- request v1: BrokerId int32; v2 adds BrokerEpoch int64; v3 is the first flexible
  version (compact encodings, tagged fields). v0 is not served: its request header has
  no client id, which no listener of ours parses (Kafka 2.2+ brokers send v2 or v3);
- response v1-v2: ErrorCode int16, RemainingPartitions [TopicName string,
  PartitionIndex int32]; v3 the same, flexible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from kio.static.primitive import i16

from tidegate.protocol.hand_written import HandWrittenMessage, Reader, Writer, register

__all__ = [
    "API_KEY",
    "MAX_VERSION",
    "MIN_VERSION",
    "ControlledShutdownRequest",
    "ControlledShutdownResponse",
    "RemainingPartition",
    "request_for",
    "response_for",
]

API_KEY = 7
MIN_VERSION, MAX_VERSION = 1, 3
UNKNOWN_BROKER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class ControlledShutdownRequest(HandWrittenMessage):
    broker_id: int
    broker_epoch: int = UNKNOWN_BROKER_EPOCH

    __type__ = EntityType.request
    __api_key__ = i16(API_KEY)

    def encode_body(self) -> bytes:
        w = Writer()
        w.int32(self.broker_id)
        if self.__version__ >= 2:
            w.int64(self.broker_epoch)
        if self.__flexible__:
            w.no_tags()
        return w.bytes()

    @classmethod
    def decode_body(cls, buf: bytes, pos: int) -> tuple[Self, int]:
        r = Reader(buf, pos)
        broker_id = r.int32()
        epoch = r.int64() if cls.__version__ >= 2 else UNKNOWN_BROKER_EPOCH
        if cls.__flexible__:
            r.skip_tags()
        return cls(broker_id, epoch), r.pos


@dataclass(frozen=True, slots=True)
class RemainingPartition:
    topic_name: str
    partition_index: int


@dataclass(frozen=True, slots=True)
class ControlledShutdownResponse(HandWrittenMessage):
    error_code: ErrorCode
    remaining_partitions: tuple[RemainingPartition, ...] = ()

    __type__ = EntityType.response
    __api_key__ = i16(API_KEY)

    def encode_body(self) -> bytes:
        flexible = self.__flexible__
        w = Writer()
        w.int16(int(self.error_code))
        w.array_length(len(self.remaining_partitions), flexible)
        for rp in self.remaining_partitions:
            w.string(rp.topic_name, flexible)
            w.int32(rp.partition_index)
            if flexible:
                w.no_tags()
        if flexible:
            w.no_tags()
        return w.bytes()

    @classmethod
    def decode_body(cls, buf: bytes, pos: int) -> tuple[Self, int]:
        flexible = cls.__flexible__
        r = Reader(buf, pos)
        try:
            code = ErrorCode(r.int16())
        except ValueError as e:
            raise ValueError(f"unknown error code: {e}") from None
        parts = []
        for _ in range(r.array_length(flexible)):
            name = r.string(flexible)
            parts.append(RemainingPartition(name, r.int32()))
            if flexible:
                r.skip_tags()
        if flexible:
            r.skip_tags()
        return cls(code, tuple(parts)), r.pos


# One class per version, as kio has: the version and flexibility are class attributes.
class ControlledShutdownRequestV1(ControlledShutdownRequest):
    __slots__ = ()
    __version__ = i16(1)
    __flexible__ = False


class ControlledShutdownRequestV2(ControlledShutdownRequest):
    __slots__ = ()
    __version__ = i16(2)
    __flexible__ = False


class ControlledShutdownRequestV3(ControlledShutdownRequest):
    __slots__ = ()
    __version__ = i16(3)
    __flexible__ = True


class ControlledShutdownResponseV1(ControlledShutdownResponse):
    __slots__ = ()
    __version__ = i16(1)
    __flexible__ = False


class ControlledShutdownResponseV2(ControlledShutdownResponse):
    __slots__ = ()
    __version__ = i16(2)
    __flexible__ = False


class ControlledShutdownResponseV3(ControlledShutdownResponse):
    __slots__ = ()
    __version__ = i16(3)
    __flexible__ = True


_REQUESTS: dict[int, type[ControlledShutdownRequest]] = {
    1: ControlledShutdownRequestV1, 2: ControlledShutdownRequestV2,
    3: ControlledShutdownRequestV3}
_RESPONSES: dict[int, type[ControlledShutdownResponse]] = {
    1: ControlledShutdownResponseV1, 2: ControlledShutdownResponseV2,
    3: ControlledShutdownResponseV3}

register("controlled_shutdown", list(_REQUESTS.values()), list(_RESPONSES.values()))


def request_for(version: int, broker_id: int,
                broker_epoch: int = UNKNOWN_BROKER_EPOCH) -> ControlledShutdownRequest:
    return _REQUESTS[version](broker_id, broker_epoch)


def response_for(version: int, error_code: ErrorCode,
                 remaining: tuple[tuple[str, int], ...] = ()) -> ControlledShutdownResponse:
    parts = tuple(RemainingPartition(t, p) for t, p in remaining)
    return _RESPONSES[version](error_code, parts)
