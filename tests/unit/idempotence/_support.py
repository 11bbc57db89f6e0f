"""Helpers for the idempotence tests: batch headers without building real batches."""

from __future__ import annotations

import dataclasses

from tidegate.records.batch import (
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    TRANSACTIONAL_MASK,
    BatchHeader,
)

INT32_MAX = (1 << 31) - 1


def header(
    producer_id: int,
    epoch: int,
    seq: int,
    count: int = 1,
    *,
    base_offset: int = 0,
    transactional: bool = False,
    control: bool = False,
    timestamp: int = 1_000,
) -> BatchHeader:
    attributes = (TRANSACTIONAL_MASK if transactional else 0) | (CONTROL_MASK if control else 0)
    return BatchHeader(
        base_offset=base_offset,
        batch_length=HEADER_SIZE - LOG_OVERHEAD + 10 * count,
        partition_leader_epoch=0,
        magic=MAGIC_V2,
        crc=0,
        attributes=attributes,
        last_offset_delta=count - 1,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=seq,
        records_count=count,
    )


def at(h: BatchHeader, base_offset: int) -> BatchHeader:
    """The header after the broker assigned offsets."""
    return dataclasses.replace(h, base_offset=base_offset)


def marker(producer_id: int, epoch: int, *, base_offset: int = 0) -> BatchHeader:
    return header(
        producer_id, epoch, -1, 1, base_offset=base_offset, transactional=True, control=True
    )
