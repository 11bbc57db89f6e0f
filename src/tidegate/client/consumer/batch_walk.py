"""The batch walk over one partition's fetched bytes, shared by both consumer decoders.

`state.parse_partition_records` (records) and `columns.parse_partition_columns`
(column buffers) decode the same fetch data under the same rules, which live here
once: each complete batch is read with its header (and CRC, `check_crcs`) checked; a
batch cut short at the end (the broker cuts at the fetch size) ends the walk, one
whose size is below a batch header is corrupt; control batches are never kept, nor
(read_committed, `aborted` given) batches of aborted transactions — the
`AbortedFilter` sees every batch, also those before the fetch offset, since a
transaction may start before it.

The walk is per batch, not per record (the decoders decode each batch's records
themselves), so the generator costs one resume per batch on the consumer's hot path.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from tidegate.client.consumer.aborted import AbortedFilter, AbortedTransaction
from tidegate.client.types import TopicPartition
from tidegate.common.errors import CorruptRecordError
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
    CorruptRecordError / InvalidRecordError for bad data."""
    if not data:
        return
    txn_filter = None if aborted is None else AbortedFilter(aborted)
    pos = 0
    end = len(data)
    while pos < end:
        size = peek_size(data, pos)
        if size is None or size > end - pos:
            if size is not None and size < HEADER_SIZE:
                raise CorruptRecordError(
                    f"record batch at byte {pos} of the fetch for "
                    f"{tp.topic}-{tp.partition} is too short")
            return
        header, section = read_batch(data, pos, check_crc=check_crcs)
        pos += size
        is_control = header.is_control
        # Control records stay tuples: only the aborted filter reads them. They are
        # decoded (so checked) without the filter too, as a dropped data batch is.
        control = decode_record_tuples(header, section) if is_control else _NO_RECORDS
        keep = not is_control
        if txn_filter is not None:
            keep = txn_filter.accept(
                last_offset=header.last_offset, producer_id=header.producer_id,
                is_transactional=header.is_transactional, is_control=is_control,
                records=control)
        yield header, section, keep, header.next_offset <= fetch_offset
