"""Transaction markers: the COMMIT / ABORT control records that end a transaction.

A marker is a batch with the transactional and control attribute bits set, the
producer's id and epoch, no sequence, and exactly one record whose

- key   = int16 version (0) + int16 type (0 = ABORT, 1 = COMMIT), and
- value = int16 version (0) + int32 coordinatorEpoch (Kafka's EndTxnMarker).

Parsing follows the Java client: a version above 0 is accepted and its leading fields
read (newer versions may only append fields); a negative version, a short key or value,
or a control type other than ABORT/COMMIT (e.g. KRaft's LEADER_CHANGE = 2) raises
`InvalidRecordError`.
"""

from __future__ import annotations

import struct
from enum import IntEnum

from tidegate.common.errors import InvalidRecordError
from tidegate.records.batch import NO_PARTITION_LEADER_EPOCH
from tidegate.records.builder import BatchBuilder

__all__ = [
    "ControlType",
    "build_control_batch",
    "encode_control_key",
    "encode_control_value",
    "parse_control_record",
]

CONTROL_RECORD_VERSION = 0
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


def encode_control_key(control_type: ControlType) -> bytes:
    return _KEY.pack(CONTROL_RECORD_VERSION, int(control_type))


def encode_control_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(CONTROL_RECORD_VERSION, coordinator_epoch)


def build_control_batch(
    *,
    producer_id: int,
    producer_epoch: int,
    control_type: ControlType,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A complete marker batch (transactional + control, one record, uncompressed)."""
    builder = BatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append(
        timestamp,
        encode_control_key(ControlType(control_type)),
        encode_control_value(coordinator_epoch),
    )
    return builder.build()


def parse_control_record(key: bytes | None, value: bytes | None) -> tuple[ControlType, int]:
    """Return (marker type, coordinator epoch) of a control record's key and value."""
    if key is None or len(key) < _KEY.size:
        raise InvalidRecordError(
            f"control record key must be at least {_KEY.size} bytes, got "
            f"{'null' if key is None else len(key)}"
        )
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"invalid control record key version {version}")
    try:
        control_type = ControlType(type_id)
    except ValueError:
        raise InvalidRecordError(
            f"control record type {type_id} is not a transaction marker (ABORT=0, COMMIT=1)"
        ) from None
    if value is None or len(value) < _VALUE.size:
        raise InvalidRecordError(
            f"transaction marker value must be at least {_VALUE.size} bytes, got "
            f"{'null' if value is None else len(value)}"
        )
    value_version, coordinator_epoch = _VALUE.unpack_from(value)
    if value_version < 0:
        raise InvalidRecordError(f"invalid transaction marker value version {value_version}")
    return control_type, coordinator_epoch
