"""The AddPartitionsToTxn (API key 24) and EndTxn (26) requests, v0-v5, decoded by hand.

Why: a one-record transaction sends both once per commit. kio's native reader is fast,
but `guard.check`'s schema walk before it is Python; one pass here does both jobs, about
a fifth less time (docs/benchmarks.md, "One-record transactions"). The responses
(txn_responses.py) are where most of the per-commit codec time went.

The objects carry the attribute names the handlers read on kio's (AddPartitionsToTxn
v0-v3: `v3_and_below_*`; v4+: `transactions`; EndTxn: `transactional_id`,
`producer_id`, `producer_epoch`, `committed`), with plain int/str/bool values, in
slotted dataclasses. Malformed input raises `TxnDecodeError` where `guard.check` or kio
would refuse it: a length past the end, a negative length other than -1, a null
anywhere (no field of these schemas is nullable), a string that is not UTF-8, a boolean
byte other than 0 or 1, a varint over 5 bytes. Tagged fields (v3+, none defined) are
skipped, as Kafka's parsers skip unknown tags (kio refused them). Trailing bytes are
left to `messages.decode`'s `strict`.
tests/unit/protocol/test_txn_requests.py checks the values equal kio's for every served
version on random requests, and that garbled bodies fail in both or in neither.

Wire format (Kafka's schemas): AddPartitionsToTxn v0-v3: TransactionalId string,
ProducerId int64, ProducerEpoch int16, Topics [Name string, Partitions [int32]]; v4+:
Transactions [TransactionalId string, ProducerId int64, ProducerEpoch int16, VerifyOnly
bool, Topics [...]]. EndTxn: TransactionalId string, ProducerId int64, ProducerEpoch
int16, Committed bool. v3+ are flexible (compact lengths: unsigned varint of length + 1,
a tagged-field section after each structure).
"""

# no `from __future__ import annotations`: the dataclasses' annotations are real types,
# as kio's, for the code that reads them (tests/unit/protocol/test_nulls.py)
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidegate.protocol.flexible import read_uvarint, skip_tagged_fields

__all__ = [
    "ADD_PARTITIONS_KEY",
    "END_TXN_KEY",
    "FIRST_FLEXIBLE",
    "MAX_VERSION",
    "MIN_VERSION",
    "AddPartitionsToTxnRequest",
    "AddPartitionsToTxnTopic",
    "AddPartitionsToTxnTransaction",
    "EndTxnRequest",
    "TxnDecodeError",
    "decode_add_partitions",
    "decode_end_txn",
    "decoders",
]

ADD_PARTITIONS_KEY, END_TXN_KEY = 24, 26
MIN_VERSION, MAX_VERSION = 0, 5
FIRST_FLEXIBLE = 3
FIRST_BATCHED = 4  # AddPartitionsToTxn v4+: many transactions (KIP-890, brokers only)

Buffer = bytes | memoryview

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PID_EPOCH = struct.Struct(">qh")
_PID_EPOCH_BOOL = struct.Struct(">qhB")


class TxnDecodeError(ValueError):
    """The body is not a well-formed request of the version given."""


@dataclass(slots=True)
class AddPartitionsToTxnTopic:
    name: str
    partitions: tuple[int, ...]


@dataclass(slots=True)
class AddPartitionsToTxnTransaction:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    verify_only: bool
    topics: tuple[AddPartitionsToTxnTopic, ...]


@dataclass(slots=True)
class AddPartitionsToTxnRequest:
    """v0-v3 fill the `v3_and_below_*` fields, v4+ `transactions` (the other side's
    fields keep their defaults: the handler reads only its version's)."""

    v3_and_below_transactional_id: str = ""
    v3_and_below_producer_id: int = -1
    v3_and_below_producer_epoch: int = -1
    v3_and_below_topics: tuple[AddPartitionsToTxnTopic, ...] = ()
    transactions: tuple[AddPartitionsToTxnTransaction, ...] = ()


@dataclass(slots=True)
class EndTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool


def _length(buf: Buffer, pos: int, end: int, flexible: bool, wide: bool,
            what: str) -> tuple[int, int]:
    """A non-nullable length prefix; `wide`: int32 when not flexible, else int16."""
    if flexible:
        if pos < end and buf[pos] < 0x80:  # a one-byte varint, the usual case
            n = buf[pos] - 1
            pos += 1
        else:
            n, pos = read_uvarint(buf, pos, end, TxnDecodeError)
            n -= 1
    else:
        size = 4 if wide else 2
        if pos + size > end:
            raise TxnDecodeError("truncated length")
        (n,) = (_I32 if wide else _I16).unpack_from(buf, pos)
        pos += size
    if n < 0:
        raise TxnDecodeError(f"non-nullable field {what} has length {n}")
    if n > end - pos:
        raise TxnDecodeError(f"{what}: length {n} runs past the end ({end - pos} left)")
    return n, pos


def _string(buf: Buffer, pos: int, end: int, flexible: bool, what: str) -> tuple[str, int]:
    n, pos = _length(buf, pos, end, flexible, False, what)
    try:
        return str(buf[pos : pos + n], "utf-8"), pos + n
    except UnicodeDecodeError as e:
        raise TxnDecodeError(f"{what} is not UTF-8: {e}") from None


def _tags(buf: Buffer, pos: int, end: int) -> int:
    if pos < end and buf[pos] == 0:  # no tagged fields, the usual case
        return pos + 1
    return skip_tagged_fields(buf, pos, end, TxnDecodeError)


def _bool(b: int) -> bool:
    if b > 1:
        raise TxnDecodeError(f"invalid boolean byte {b}")
    return b == 1


def _topics(buf: Buffer, pos: int, end: int, flexible: bool
            ) -> tuple[tuple[AddPartitionsToTxnTopic, ...], int]:
    n_topics, pos = _length(buf, pos, end, flexible, True, "topics")
    topics = []
    for _ in range(n_topics):
        name, pos = _string(buf, pos, end, flexible, "name")
        n, pos = _length(buf, pos, end, flexible, True, "partitions")
        if 4 * n > end - pos:
            raise TxnDecodeError(f"{n} partitions run past the end")
        parts = struct.unpack_from(f">{n}i", buf, pos) if n else ()
        pos += 4 * n
        if flexible:
            pos = _tags(buf, pos, end)
        topics.append(AddPartitionsToTxnTopic(name, parts))
    return tuple(topics), pos


def decode_add_partitions(buf: Buffer, pos: int, version: int
                          ) -> tuple[AddPartitionsToTxnRequest, int]:
    """The request whose body starts at `pos`, and the position after it."""
    end = len(buf)
    flexible = version >= FIRST_FLEXIBLE
    if version < FIRST_BATCHED:
        txn_id, pos = _string(buf, pos, end, flexible, "transactional_id")
        if pos + 10 > end:
            raise TxnDecodeError("truncated producer id/epoch")
        pid, epoch = _PID_EPOCH.unpack_from(buf, pos)
        topics, pos = _topics(buf, pos + 10, end, flexible)
        if flexible:
            pos = _tags(buf, pos, end)
        return AddPartitionsToTxnRequest(txn_id, pid, epoch, topics), pos
    n_txns, pos = _length(buf, pos, end, True, True, "transactions")
    txns = []
    for _ in range(n_txns):
        txn_id, pos = _string(buf, pos, end, True, "transactional_id")
        if pos + 11 > end:
            raise TxnDecodeError("truncated producer id/epoch/verify_only")
        pid, epoch, verify = _PID_EPOCH_BOOL.unpack_from(buf, pos)
        topics, pos = _topics(buf, pos + 11, end, True)
        pos = _tags(buf, pos, end)
        txns.append(AddPartitionsToTxnTransaction(txn_id, pid, epoch, _bool(verify), topics))
    pos = _tags(buf, pos, end)
    return AddPartitionsToTxnRequest(transactions=tuple(txns)), pos


def decode_end_txn(buf: Buffer, pos: int, version: int) -> tuple[EndTxnRequest, int]:
    """The request whose body starts at `pos`, and the position after it."""
    end = len(buf)
    flexible = version >= FIRST_FLEXIBLE
    txn_id, pos = _string(buf, pos, end, flexible, "transactional_id")
    if pos + 11 > end:
        raise TxnDecodeError("truncated producer id/epoch/committed")
    pid, epoch, committed = _PID_EPOCH_BOOL.unpack_from(buf, pos)
    pos += 11
    if flexible:
        pos = _tags(buf, pos, end)
    return EndTxnRequest(txn_id, pid, epoch, _bool(committed)), pos


Decoder = Callable[[Buffer, int, int], tuple[Any, int]]


def decoders() -> dict[int, tuple[Decoder, int, int]]:
    """The hand decoder of each API key this module reads, with its served versions
    (txn_offsets.py has the same for AddOffsetsToTxn and TxnOffsetCommit)."""
    return {ADD_PARTITIONS_KEY: (decode_add_partitions, MIN_VERSION, MAX_VERSION),
            END_TXN_KEY: (decode_end_txn, MIN_VERSION, MAX_VERSION)}
