"""The batch walk over one partition's fetched bytes, shared by both consumer decoders.

`state.parse_partition_records` (records) and `columns.parse_partition_columns`
(column buffers) decode the same fetch data under the same rules, which live here
once: each complete batch is read with its header (and CRC, `check_crcs`) checked; a
batch cut short at the end (the broker cuts at the fetch size) ends the walk, one
whose size is below a batch header is corrupt; control batches are never kept, nor
(read_committed, `aborted` given) batches of aborted transactions — the
`AbortedFilter` sees every batch, also those before the fetch offset, since a
transaction may start before it.

A corrupt batch (or one whose records do not decode) after batches that moved past
the fetch offset ends the walk instead of failing it, as Kafka's consumer hands out
the records before a corrupt one: those batches are handed out, and the partition's
next fetch starts at the corrupt batch, so the error surfaces when the application's
position reaches it (the decoders stop where the walk stops;
`state.parse_partition_records` does the same for a data batch whose records do not
decode).

The walk is per batch, not per record (the decoders decode each batch's records
themselves), so the generator costs one resume per batch on the consumer's hot path.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from tidegate.client.consumer.aborted import AbortedFilter, AbortedTransaction
from tidegate.client.types import TopicPartition
from tidegate.common.errors import CorruptRecordError, InvalidRecordError
from tidegate.records.batch import HEADER_SIZE, BatchHeader, peek_size
from tidegate.records.record import RecordTuple, decode_record_tuples, read_batch

__all__ = ["WalkedBatch", "walk_batches"]

# (header, records section, keep: its records may be handed out (never for a control
# batch), before_fetch: the whole batch lies before the fetch offset). A plain tuple,
# not a NamedTuple: one is made per batch on the hot path.
WalkedBatch = tuple[BatchHeader, bytes, bool, bool]

_NO_RECORDS: list[RecordTuple] = []  # never appended to


def walk_batches(
    tp: TopicPartition,
    fetch_offset: int,
    data: bytes | None,
    check_crcs: bool = True,
    aborted: Iterable[AbortedTransaction] | None = None,
) -> Iterator[WalkedBatch]:
    """Every complete batch of `data` in order (see the module docstring). Raises
    CorruptRecordError / InvalidRecordError for bad data before any batch past
    `fetch_offset`; bad data after one ends the walk."""
    if not data:
        return
    txn_filter = None if aborted is None else AbortedFilter(aborted)
    pos = 0
    end = len(data)
    progressed = False  # a batch moved past the fetch offset: stop at a corrupt one
    while pos < end:
        size = peek_size(data, pos)
        if size is None or size > end - pos:
            if size is not None and size < HEADER_SIZE:
                if progressed:
                    return
                raise CorruptRecordError(
                    f"record batch at byte {pos} of the fetch for "
                    f"{tp.topic}-{tp.partition} is too short")
            return
        try:
            header, section = read_batch(data, pos, check_crc=check_crcs)
            is_control = header.is_control
            # Control records stay tuples: only the aborted filter reads them. They
            # are decoded (so checked) without the filter too, as a dropped data batch
            # is.
            control = decode_record_tuples(header, section) if is_control else _NO_RECORDS
        except (CorruptRecordError, InvalidRecordError):
            if progressed:
                return  # handed out up to here; the next fetch starts at this batch
            raise
        pos += size
        keep = not is_control
        if txn_filter is not None:
            keep = txn_filter.accept(
                last_offset=header.last_offset, producer_id=header.producer_id,
                is_transactional=header.is_transactional, is_control=is_control,
                records=control)
        before_fetch = header.next_offset <= fetch_offset
        progressed |= not before_fetch
        yield header, section, keep, before_fetch
