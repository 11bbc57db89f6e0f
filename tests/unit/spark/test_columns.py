"""The columnar read (C `records._columnar` -> `arrow.columns_to_batch`) against the row path.

On random fetches — data batches with null keys and values, headers, both timestamp
types, every codec, control batches, aborted transactions (read_committed), a fetch
offset inside a batch and a partial batch at the end — the Arrow batch built from the
consumer's column buffers must equal `records_to_batch` of the records the row path
(`parse_partition_records`) hands out, slice by slice as `take_columns` cuts them, with
the same positions; damaged data must fail the same way. Skipped without the extension.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("tidegate.records._columnar")
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.client.test_consumer_decode import (
    TP,
    batch_st,
    build_fetch,
    damaged_batch,
    draw_fetch,
    outcome,
    record_st,
)

from tidegate.client.consumer.aborted import AbortedTransaction
from tidegate.client.consumer.columns import parse_partition_columns
from tidegate.common.errors import CorruptRecordError, InvalidRecordError
from tidegate.spark.arrow import columns_to_batch, records_to_batch

FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def rows(data: bytes, fetch_offset: int, aborted: list[AbortedTransaction] | None,
         take: int) -> Any:
    r = outcome(data, fetch_offset, aborted, take)
    return r[0] if isinstance(r[0], type) else r  # an error: its type only


def columns(data: bytes, fetch_offset: int, aborted: list[AbortedTransaction] | None,
            take: int, headers: bool) -> Any:
    try:
        pc = parse_partition_columns(TP, fetch_offset, data, check_crcs=False,
                                     aborted=aborted, include_headers=headers)
    except (CorruptRecordError, InvalidRecordError) as e:
        return type(e)
    batches: list[pa.RecordBatch] = []
    positions = []
    while not pc.exhausted:
        chunk, position = pc.take_columns(take)
        positions.append(position)
        assert chunk is not None
        try:
            batches.append(columns_to_batch(TP.topic, TP.partition, chunk, headers))
        except pa.ArrowInvalid as e:
            assert "UTF8" in str(e)
            return NOT_UTF8, positions, pc.next_offset
    return batches, positions, pc.next_offset


NOT_UTF8 = "a header key is not UTF-8"


def assert_same(data: bytes, fetch_offset: int, aborted: list[AbortedTransaction] | None,
                take: int, headers: bool) -> None:
    r = rows(data, fetch_offset, aborted, take)
    if not isinstance(r, type):
        # The row path drops the records before fetch_offset only when a batch's first
        # one is (offsets ascend in valid data); the columns drop every such record.
        ascending = all(a.offset < b.offset for a, b in zip(r[0], r[0][1:]))
        r = ([rec for rec in r[0] if rec.offset >= fetch_offset],
             r[1] if ascending else None, r[2])
    if not isinstance(r, type) and headers:
        try:
            records_to_batch(TP.topic, TP.partition, r[0], headers)
        except UnicodeEncodeError:
            r = (NOT_UTF8, *r[1:])
    c = columns(data, fetch_offset, aborted, take, headers)
    if isinstance(r, type) or isinstance(c, type):
        assert c == r
        return
    records, positions, next_offset = r
    batches, c_positions, c_next = c
    if isinstance(batches, str) or isinstance(records, str):
        assert batches == records
        return
    assert c_next == next_offset
    # (a fetch whose records were all dropped moves to next_offset either way)
    if records and positions is not None:
        assert c_positions == positions
    got = pa.Table.from_batches(batches, records_to_batch(TP.topic, TP.partition, [],
                                                          headers).schema)
    want = records_to_batch(TP.topic, TP.partition, records, headers)
    assert got.num_rows == want.num_rows
    # the offsets as each record has them (records_to_batch trusts them to ascend,
    # which damaged data need not do)
    assert got.column("offset").to_pylist() == [rec.offset for rec in records]
    assert got.drop_columns(["offset"]).to_pylist() == \
        pa.Table.from_batches([want]).drop_columns(["offset"]).to_pylist()


@FUZZ
@given(batches=st.lists(batch_st, min_size=1, max_size=6), data=st.data())
def test_columns_equal_the_row_path(batches: list[Any], data: st.DataObject) -> None:
    fetch, fetch_offset, aborted, take = draw_fetch(batches, data)
    assert_same(fetch, fetch_offset, aborted, take, data.draw(st.booleans(), label="headers"))


@FUZZ
@given(records=st.lists(record_st, min_size=1, max_size=8), data=st.data())
def test_damaged_records_fail_like_the_row_path(records: list[Any], data: st.DataObject
                                                ) -> None:
    assert_same(damaged_batch(records, data), 0, None, 5, True)


def test_an_aborted_transaction_and_its_marker_are_not_in_the_columns() -> None:
    """The row path and the columns agree on dropping it; pinned here with the values,
    so the test fails if both stopped dropping it."""
    fetch, _ = build_fetch([("data", [(1, b"a", b"1", [])], 0, 0, True),
                            ("control", True),
                            ("data", [(2, None, b"2", [("h", None)])], 0, 0, False)])
    pc = parse_partition_columns(TP, 0, fetch, aborted=[AbortedTransaction(7, 0)],
                                 include_headers=True)
    chunk, position = pc.take_columns(10)
    assert chunk is not None and position == 3
    batch = columns_to_batch(TP.topic, TP.partition, chunk, True)
    assert batch.column("offset").to_pylist() == [2]
    assert batch.column("key").to_pylist() == [None]
    assert batch.column("headers").to_pylist() == [[{"key": "h", "value": None}]]
