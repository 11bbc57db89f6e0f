"""`__transaction_state` record layouts, byte for byte as Kafka writes them.

Key and value start with an int16 version (Kafka's `MessageUtil.toVersionPrefixedBytes`).

- `TransactionLogKey` v0 (never flexible): transactional_id string.
- `TransactionLogValue` v0: producer_id int64, producer_epoch int16,
  transaction_timeout_ms int32, transaction_status int8, transaction_partitions
  nullable array of (topic string, partition_ids [int32]), last_update_timestamp_ms
  int64, start_timestamp_ms int64.
- `TransactionLogValue` v1 (flexible, KIP-890 / transaction.version >= 1): the same
  fields in compact form (compact strings and arrays, a tagged-field section after each
  partitions entry), then the record's tagged fields: 0 PreviousProducerId int64
  (default -1), 1 NextProducerId int64 (default -1), 2 ClientTransactionVersion int16
  (default 0). Tagged fields are written only when not at their default, in tag order.

Beyond Kafka, v1 values carry two Tidegate tags: `LAST_PRODUCER_EPOCH_TAG` (int16), the
epoch a KIP-360 InitProducerId retry may present — Kafka keeps that epoch in memory only
(and loses it on failover); a record is the only place replay can learn it from — and
`PREPARED_PRODUCER_EPOCH_TAG` (int16), the epoch a KIP-939 transaction was prepared with
once a later process has taken it over (`keep_prepared_txn` bumps the producer's epoch;
a second takeover must still report the original one, as Kafka keeps two id/epoch pairs).
Kafka's readers skip unknown tags, so Kafka and its tools still read our values, and
we read Kafka's (the field is then absent: None).

A null value (tombstone) deletes the transactional id (expiry). Status bytes are
Kafka's `TransactionState` ids. Malformed bytes raise `TxnRecordError`, never
IndexError or struct.error; a key of an unknown version raises its subclass
`UnknownTxnKeyVersion` (Kafka's loader skips such keys).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "LAST_PRODUCER_EPOCH_TAG",
    "PREPARED_PRODUCER_EPOCH_TAG",
    "TXN_LOG_KEY_VERSION",
    "TxnLogValue",
    "TxnRecordError",
    "UnknownTxnKeyVersion",
    "decode_txn_key",
    "decode_txn_value",
    "encode_txn_key",
    "encode_txn_value",
]

TXN_LOG_KEY_VERSION = 0
LAST_PRODUCER_EPOCH_TAG = 10000
PREPARED_PRODUCER_EPOCH_TAG = 10001
_STATUS_MAX = 7

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_FIXED = struct.Struct(">qhib")  # producer_id, epoch, timeout, status
_TIMES = struct.Struct(">qq")


class TxnRecordError(ValueError):
    """A `__transaction_state` key or value cannot be decoded."""


class UnknownTxnKeyVersion(TxnRecordError):
    def __init__(self, version: int) -> None:
        super().__init__(f"unknown transaction log key version {version}")
        self.version = version


Partitions = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int  # Kafka's TransactionState id
    partitions: Partitions | None  # None: a null array (Kafka writes null for Empty)
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1  # v1 tag 0
    next_producer_id: int = -1  # v1 tag 1
    client_txn_version: int = 0  # v1 tag 2
    last_producer_epoch: int | None = None  # v1 Tidegate tag; None when absent
    prepared_producer_epoch: int | None = None  # v1 Tidegate tag; None when absent


# -- writing ---------------------------------------------------------------------------


_ONE_BYTE = [bytes([i]) for i in range(0x80)]


def _uvarint(n: int) -> bytes:
    if 0 <= n < 0x80:  # lengths, counts and small tags: every call on the commit path
        return _ONE_BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _utf8(s: str) -> bytes:
    raw = s.encode("utf-8")
    if len(raw) > 32767:
        raise TxnRecordError(f"string of {len(raw)} bytes is too long for int16")
    return raw


def encode_txn_key(transactional_id: str) -> bytes:
    raw = _utf8(transactional_id)
    return _H.pack(TXN_LOG_KEY_VERSION) + _H.pack(len(raw)) + raw


def encode_txn_value(v: TxnLogValue, version: int = 1) -> bytes:
    if version not in (0, 1):
        raise TxnRecordError(f"cannot write transaction log value version {version}")
    if not 0 <= v.status <= _STATUS_MAX:
        raise TxnRecordError(f"invalid transaction status {v.status}")
    flexible = version == 1
    parts = [_H.pack(version), _FIXED.pack(v.producer_id, v.producer_epoch, v.timeout_ms, v.status)]
    if v.partitions is None:
        parts.append(b"\x00" if flexible else _I.pack(-1))
    else:
        parts.append(_uvarint(len(v.partitions) + 1) if flexible else _I.pack(len(v.partitions)))
        for topic, ids in v.partitions:
            raw = _utf8(topic)
            if flexible:
                parts += [_uvarint(len(raw) + 1), raw, _uvarint(len(ids) + 1)]
            else:
                parts += [_H.pack(len(raw)), raw, _I.pack(len(ids))]
            parts += [_I.pack(p) for p in ids]
            if flexible:
                parts.append(b"\x00")  # the entry's (empty) tagged fields
    parts.append(_TIMES.pack(v.last_update_ms, v.start_ms))
    if flexible:
        tags: list[tuple[int, bytes]] = []
        if v.previous_producer_id != -1:
            tags.append((0, _Q.pack(v.previous_producer_id)))
        if v.next_producer_id != -1:
            tags.append((1, _Q.pack(v.next_producer_id)))
        if v.client_txn_version != 0:
            tags.append((2, _H.pack(v.client_txn_version)))
        if v.last_producer_epoch is not None:
            tags.append((LAST_PRODUCER_EPOCH_TAG, _H.pack(v.last_producer_epoch)))
        if v.prepared_producer_epoch is not None:
            tags.append((PREPARED_PRODUCER_EPOCH_TAG, _H.pack(v.prepared_producer_epoch)))
        parts.append(_uvarint(len(tags)))
        for tag, data in tags:
            parts += [_uvarint(tag), _uvarint(len(data)), data]
    return b"".join(parts)


# -- reading ---------------------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise TxnRecordError(f"transaction log record truncated at byte {self.pos}")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def unpack(self, s: struct.Struct) -> tuple[int, ...]:
        return tuple(s.unpack(self.take(s.size)))

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7
            if shift > 28:
                raise TxnRecordError("varint too long")

    def string(self, compact: bool) -> str:
        n = self.uvarint() - 1 if compact else self.unpack(_H)[0]
        if n < 0:
            raise TxnRecordError("null where a string is required")
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise TxnRecordError(f"string is not UTF-8: {e}") from None

    def array_len(self, compact: bool) -> int:
        """-1 for a null array."""
        n = self.uvarint() - 1 if compact else self.unpack(_I)[0]
        if n < -1 or n > len(self.buf):
            raise TxnRecordError(f"invalid array length {n}")
        return n

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise TxnRecordError(f"{len(self.buf) - self.pos} trailing bytes")


def decode_txn_key(key: bytes) -> str:
    """The transactional id of a key; `UnknownTxnKeyVersion` for other versions."""
    r = _Reader(key)
    version = r.unpack(_H)[0]
    if version != TXN_LOG_KEY_VERSION:
        raise UnknownTxnKeyVersion(version)
    txn_id = r.string(False)
    r.end()
    return txn_id


def decode_txn_value(value: bytes) -> TxnLogValue:
    """The value's fields. A v1 value as the coordinator writes it is read by
    `_decode_v1_fast`; anything else (v0, long varints, malformed bytes) by the checked
    reader, which raises the typed errors."""
    try:
        fast = _decode_v1_fast(value)
    except (IndexError, struct.error, UnicodeDecodeError):
        fast = None  # malformed: the checked reader says how
    return fast if fast is not None else _decode_txn_value_checked(value)


_HEAD = struct.Struct(">hqhib")  # version, then _FIXED
_KNOWN_TAG_SIZES = {0: 8, 1: 8, 2: 2, LAST_PRODUCER_EPOCH_TAG: 2, PREPARED_PRODUCER_EPOCH_TAG: 2}


def _decode_v1_fast(b: bytes) -> TxnLogValue | None:
    """A v1 value in straight-line reads: the coordinator replays every record it
    writes (three per one-record transaction), and the checked reader's call per field
    costs about twice as much. None for whatever this path leaves to the checked
    reader: another version, an out-of-range status, a varint longer than the
    coordinator writes (one byte for lengths and counts, two for the Tidegate tags), an
    entry with tagged fields, a known tag of the wrong size, trailing bytes; a read past
    the end raises IndexError / struct.error. Both readers accept the same bytes and
    errors stay typed (tests/unit/coordinator/test_txn_records.py compares them)."""
    version, producer_id, epoch, timeout, status = _HEAD.unpack_from(b, 0)
    if version != 1 or not 0 <= status <= _STATUS_MAX:
        return None
    n = b[17]
    pos = 18
    if n >= 0x80:
        return None
    partitions: Partitions | None = None
    if n:  # 0 is a null array
        entries = []
        for _ in range(n - 1):
            size = b[pos] - 1
            if not 0 <= size < 0x7F or pos + 1 + size > len(b):
                return None
            topic = b[pos + 1 : pos + 1 + size].decode("utf-8")
            pos += 1 + size
            m = b[pos] - 1
            if not 0 <= m < 0x7F:
                return None
            ids = struct.unpack_from(f">{m}i", b, pos + 1)
            pos += 1 + 4 * m
            if b[pos] != 0:
                return None
            pos += 1
            entries.append((topic, ids))
        partitions = tuple(entries)
    last_update, start = _TIMES.unpack_from(b, pos)
    pos += 16
    tags = b[pos]
    pos += 1
    if tags >= 0x80:
        return None
    prev_pid = next_pid = -1
    client_version = 0
    last_epoch: int | None = None
    prepared_epoch: int | None = None
    for _ in range(tags):
        tag = b[pos]
        pos += 1
        if tag >= 0x80:  # the Tidegate tags (10000, 10001) take two bytes
            high = b[pos]
            pos += 1
            if high >= 0x80:
                return None
            tag = (tag & 0x7F) | (high << 7)
        size = b[pos]
        pos += 1
        if size >= 0x80 or pos + size > len(b):
            return None
        want = _KNOWN_TAG_SIZES.get(tag)
        if want is not None:
            if size != want:
                return None
            if tag == 0:
                prev_pid = _Q.unpack_from(b, pos)[0]
            elif tag == 1:
                next_pid = _Q.unpack_from(b, pos)[0]
            elif tag == 2:
                client_version = _H.unpack_from(b, pos)[0]
            elif tag == LAST_PRODUCER_EPOCH_TAG:
                last_epoch = _H.unpack_from(b, pos)[0]
            else:
                prepared_epoch = _H.unpack_from(b, pos)[0]
        pos += size
    if pos != len(b):
        return None
    return TxnLogValue(producer_id, epoch, timeout, status, partitions, last_update, start,
                       prev_pid, next_pid, client_version, last_epoch, prepared_epoch)


def _decode_txn_value_checked(value: bytes) -> TxnLogValue:
    r = _Reader(value)
    version = r.unpack(_H)[0]
    if version not in (0, 1):
        raise TxnRecordError(f"unknown transaction log value version {version}")
    c = version == 1
    producer_id, epoch, timeout, status = r.unpack(_FIXED)
    if not 0 <= status <= _STATUS_MAX:
        raise TxnRecordError(f"unknown transaction status {status}")
    n = r.array_len(c)
    partitions: Partitions | None = None
    if n >= 0:
        entries = []
        for _ in range(n):
            topic = r.string(c)
            m = r.array_len(c)
            if m < 0:
                raise TxnRecordError("null partition id array")
            ids = tuple(r.unpack(_I)[0] for _ in range(m))
            if c:
                _skip_tags(r)
            entries.append((topic, ids))
        partitions = tuple(entries)
    last_update, start = r.unpack(_TIMES)
    prev_pid = next_pid = -1
    client_version = 0
    last_epoch: int | None = None
    prepared_epoch: int | None = None
    if c:
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            data = r.take(size)
            try:
                if tag == 0:
                    prev_pid = _Q.unpack(data)[0]
                elif tag == 1:
                    next_pid = _Q.unpack(data)[0]
                elif tag == 2:
                    client_version = _H.unpack(data)[0]
                elif tag == LAST_PRODUCER_EPOCH_TAG:
                    last_epoch = _H.unpack(data)[0]
                elif tag == PREPARED_PRODUCER_EPOCH_TAG:
                    prepared_epoch = _H.unpack(data)[0]
            except struct.error:
                raise TxnRecordError(f"tagged field {tag} has {size} bytes") from None
    r.end()
    return TxnLogValue(producer_id, epoch, timeout, status, partitions, last_update, start,
                       prev_pid, next_pid, client_version, last_epoch, prepared_epoch)


def _skip_tags(r: _Reader) -> None:
    for _ in range(r.uvarint()):
        r.uvarint()
        r.take(r.uvarint())
