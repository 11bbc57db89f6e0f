"""Transaction markers as the storage layer sees them: build one, read one back.

A marker (COMMIT / ABORT control batch, see `records.control`) is the only batch whose
record content the producer state needs: its type decides whether the transaction it
ends goes to the aborted-transaction index, and its coordinator epoch fences older
transaction coordinators. `marker_of` decodes it from bytes (appends), `read_marker` from
a segment (recovery and replay, which otherwise read batch headers only), `decode_marker`
from a replica's fetched bytes (`is_marker_batch` says which batches to decode).

Control batches that are not transaction markers (e.g. KRaft's LEADER_CHANGE) are
refused on append (`InvalidRecordError`); read back from disk they are logged and
treated as having no transactional effect.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tidegate.common.errors import CorruptRecordError, InvalidRecordError
from tidegate.records.batch import BatchHeader
from tidegate.records.control import ControlType, build_control_batch, parse_control_record
from tidegate.records.record import decode_batch_tuples

if TYPE_CHECKING:
    from tidegate.storage.segment import LogSegment

__all__ = ["build_marker", "decode_marker", "is_marker_batch", "marker_of", "read_marker"]

log = logging.getLogger(__name__)


def build_marker(
    producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, now_ms: int
) -> bytes:
    return build_control_batch(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        control_type=ControlType.COMMIT if commit else ControlType.ABORT,
        coordinator_epoch=coordinator_epoch,
        timestamp=now_ms,
    )


def marker_of(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = True
) -> tuple[ControlType, int]:
    """(type, coordinator epoch) of the control batch at `pos`. Raises
    InvalidRecordError / CorruptRecordError if it is not a well-formed marker."""
    header, records = decode_batch_tuples(buf, pos, check_crc=check_crc)
    if not header.is_control or not records:
        raise InvalidRecordError(f"batch at offset {header.base_offset} is not a marker")
    _offset, _ts, key, value, _headers = records[0]
    return parse_control_record(key, value)


def is_marker_batch(header: BatchHeader) -> bool:
    """A control batch of a producer with a record: possibly a COMMIT/ABORT marker (an
    empty one is what the cleaner leaves of a removed transaction)."""
    return header.is_control and header.producer_id >= 0 and header.records_count > 0


def read_marker(
    seg: LogSegment, position: int, header: BatchHeader
) -> tuple[ControlType, int] | None:
    """The marker stored at `position` of `seg`, or None (logged) if it is not one."""
    return decode_marker(seg.read(position, header.size), 0, header, seg.log_path)


def decode_marker(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader, where: object
) -> tuple[ControlType, int] | None:
    """The marker at `pos` of `buf` (CRC already checked, or not needed), or None, logged
    with `where`, if it is not one: such a batch has no transactional effect."""
    try:
        return marker_of(buf, pos, check_crc=False)
    except (CorruptRecordError, InvalidRecordError) as exc:
        log.warning(
            "%s: control batch at offset %d is not a transaction marker: %s",
            where,
            header.base_offset,
            exc,
        )
        return None
