"""The consumer's fetched records from the C decoder against the pure-Python path.

`parse_partition_records` decodes data batches with `record.decode_record_objects`,
which (with the C extension) makes each `ConsumerRecord` without calling it: allocated,
then its slots set from C. These tests pin that the records are the ones the
pure-Python code builds through `ConsumerRecord.__init__` — same values, same types,
same repr, equality and pickling — and that bad data raises the same error either way,
on random fetches of data batches (null keys and values, headers, both timestamp types,
every codec), control batches and aborted transactions. Skipped without the extension.
"""

from __future__ import annotations

import gc
import pickle
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidegate.client.consumer.aborted import AbortedTransaction
from tidegate.client.consumer.state import parse_partition_records
from tidegate.client.types import ConsumerRecord, TopicPartition
from tidegate.common.errors import CorruptRecordError, InvalidRecordError
from tidegate.records import record
from tidegate.records.batch import HEADER_SIZE, peek_size
from tidegate.records.builder import build_batch
from tidegate.records.compression import Codec
from tidegate.records.control import ControlType, build_control_batch

_speedups = pytest.importorskip("tidegate.records._speedups")

TP = TopicPartition("topic-ü", 3)
BASE_TS = 1_700_000_000_000
SLOTS = ConsumerRecord.__slots__
FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

headers_st = st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=8)),
                      max_size=2)
record_st = st.tuples(
    st.one_of(st.integers(BASE_TS - 50, BASE_TS + 50), st.integers(0, 1 << 45), st.just(-1)),
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=120),
    headers_st,
)
# ("data", records, codec, timestamp type, transactional) or ("control", abort?)
batch_st = st.one_of(
    st.tuples(st.just("data"), st.lists(record_st, min_size=1, max_size=12),
              st.sampled_from(list(Codec)), st.sampled_from([0, 1]), st.booleans()),
    st.tuples(st.just("control"), st.booleans()),
)


def build_fetch(batches: list[Any]) -> tuple[bytes, int]:
    out = bytearray()
    offset = 0
    for b in batches:
        if b[0] == "data":
            _, records, codec, ts_type, txn = b
            out += build_batch(records, base_offset=offset, compression=codec,
                               timestamp_type=ts_type, is_transactional=txn,
                               producer_id=7 if txn else -1, producer_epoch=0 if txn else -1)
            offset += len(records)
        else:
            out += build_control_batch(
                producer_id=7, producer_epoch=0, coordinator_epoch=0, timestamp=BASE_TS,
                control_type=ControlType.ABORT if b[1] else ControlType.COMMIT,
                base_offset=offset)
            offset += 1
    return bytes(out), offset


def draw_fetch(batches: list[Any], data: st.DataObject
               ) -> tuple[bytes, int, list[AbortedTransaction] | None, int]:
    """A fetch of `batches` (maybe cut inside its last batch), a fetch offset, aborted
    transactions (None: read_uncommitted) and max records per take, drawn from `data`."""
    fetch, end = build_fetch(batches)
    cut = data.draw(st.integers(0, 40), label="bytes cut off the end")
    fetch = fetch[:len(fetch) - cut]  # a partial batch at the end is ignored
    fetch_offset = data.draw(st.integers(0, end), label="fetch_offset")
    aborted = data.draw(st.none() | st.lists(
        st.builds(AbortedTransaction, st.just(7), st.integers(0, end)), max_size=2))
    return fetch, fetch_offset, aborted, data.draw(st.integers(1, 7), label="max_records")


def damaged_batch(records: list[Any], data: st.DataObject) -> bytes:
    """A batch of `records` with 1-3 bytes after its header overwritten."""
    batch = bytearray(build_batch(records))
    size = peek_size(batch, 0)
    assert size is not None
    for _ in range(data.draw(st.integers(1, 3), label="damaged bytes")):
        i = data.draw(st.integers(HEADER_SIZE, size - 1), label="byte")
        batch[i] = data.draw(st.integers(0, 255), label="value")
    return bytes(batch)


@contextmanager
def pure_python() -> Iterator[None]:
    saved = record._decode_records_c, record._decode_records_as_c
    record._decode_records_c = record._decode_records_as_c = None
    try:
        yield
    finally:
        record._decode_records_c, record._decode_records_as_c = saved


def outcome(data: bytes, fetch_offset: int, aborted: list[AbortedTransaction] | None,
            take: int) -> Any:
    """The row path on `data`: the records taken `take` at a time, the position after
    each take and the fetch's next offset; or the error's type and message (also
    tests/unit/spark/test_columns.py's reference)."""
    try:
        pr = parse_partition_records(TP, fetch_offset, data, check_crcs=False,
                                     aborted=aborted)
    except (CorruptRecordError, InvalidRecordError) as e:
        return type(e), str(e)
    got: list[ConsumerRecord] = []
    positions = []
    while not pr.exhausted:
        positions.append(pr.take(take, got))
    return got, positions, pr.next_offset


def assert_same_records(c: list[ConsumerRecord], py: list[ConsumerRecord]) -> None:
    assert c == py
    for a, b in zip(c, py, strict=True):
        assert type(a) is ConsumerRecord
        for name in SLOTS:
            assert type(getattr(a, name)) is type(getattr(b, name)), name
        assert repr(a) == repr(b)


@FUZZ
@given(batches=st.lists(batch_st, min_size=1, max_size=6), data=st.data())
def test_c_records_equal_pure_python_records(batches: list[Any], data: st.DataObject) -> None:
    fetch, fetch_offset, aborted, take = draw_fetch(batches, data)
    c = outcome(fetch, fetch_offset, aborted, take)
    with pure_python():
        py = outcome(fetch, fetch_offset, aborted, take)
    assert c[1:] == py[1:]  # positions and next offset (or the error's message)
    assert_same_records(c[0], py[0])


@FUZZ
@given(records=st.lists(record_st, min_size=1, max_size=8), data=st.data())
def test_damaged_records_raise_the_same_error(records: list[Any], data: st.DataObject) -> None:
    batch = damaged_batch(records, data)
    c = outcome(batch, 0, None, 5)
    with pure_python():
        py = outcome(batch, 0, None, 5)
    if isinstance(py[0], type):
        assert c == py
    else:
        assert_same_records(c[0], py[0])


def test_records_pickle_copy_and_compare_like_constructed_ones() -> None:
    fetch = build_batch([(BASE_TS, b"k", b"v", [("h", None)]), (BASE_TS + 1, None, None)],
                        base_offset=40)
    got: list[ConsumerRecord] = []
    parse_partition_records(TP, 40, fetch).take(10, got)
    made = ConsumerRecord(TP.topic, TP.partition, 40, BASE_TS, 0, b"k", b"v", (("h", None),))
    assert got[0] == made and got[0] != got[1]
    assert pickle.loads(pickle.dumps(got[0])) == made
    assert repr(got[0]) == repr(made)
    got[0].value = b"changed"  # still an ordinary, writable instance
    assert got[0].value == b"changed"


def test_take_raw_gives_records_equal_to_the_decoded_ones() -> None:
    fetch = build_batch([(BASE_TS + i, b"k", b"v%d" % i) for i in range(5)], base_offset=2)
    pr = parse_partition_records(TP, 3, fetch)
    raw, position = pr.take_raw(10)
    assert position == 7
    assert raw == [record.Record(2 + i, BASE_TS + i, b"k", b"v%d" % i) for i in range(1, 5)]


def test_a_record_given_a_cycle_is_tracked_and_collected() -> None:
    """The C decoder's records are not tracked by the cycle collector (nothing in them
    can refer back); assigning an attribute tracks the record again, so a cycle made
    through it is still freed."""
    fetch = build_batch([(BASE_TS, b"k", b"v", [("h", b"x")])])
    got: list[ConsumerRecord] = []
    parse_partition_records(TP, 0, fetch).take(1, got)
    (r,) = got
    assert gc.is_tracked(r) == (record.gc_track is None)  # pure Python: as constructed
    assert gc.is_tracked(ConsumerRecord("t", 0, 0, 0, 0, None, None, ()))

    class Box:
        pass

    box = Box()
    r.value = box  # type: ignore[assignment]  # a cycle: r -> box -> r
    box.record = r  # type: ignore[attr-defined]
    assert gc.is_tracked(r)
    alive = weakref.ref(box)
    del r, box, got
    gc.collect()
    assert alive() is None


class _NoSlots:
    pass


class _Partial:  # all but one of the slots
    __slots__ = tuple(s for s in SLOTS if s != "headers")


class _Property:  # a property where a slot is expected
    __slots__ = tuple(s for s in SLOTS if s != "key")

    @property
    def key(self) -> None:
        return None


class _Sub(ConsumerRecord):  # a subclass with a __dict__: its slots are inherited
    pass


@pytest.mark.parametrize("cls", [_NoSlots, _Partial, _Property, 42, int, tuple])
def test_decode_records_as_refuses_classes_without_the_slots(cls: Any) -> None:
    data = bytes(build_batch([(BASE_TS, b"k", b"v")]))[HEADER_SIZE:]
    with pytest.raises(TypeError):
        _speedups.decode_records_as(data, 1, 0, BASE_TS, None, cls, "t", 0, 0)


def test_decode_records_as_fills_a_subclass() -> None:
    data = bytes(build_batch([(BASE_TS, b"k", b"v")]))[HEADER_SIZE:]
    (r,) = _speedups.decode_records_as(data, 1, 5, BASE_TS, None, _Sub, "t", 1, 0)
    assert type(r) is _Sub
    assert (r.topic, r.partition, r.offset, r.timestamp, r.key, r.value, r.headers) == (
        "t", 1, 5, BASE_TS, b"k", b"v", ())
    r.extra = 1  # its __dict__ works
    # the class cache switches back
    (q,) = _speedups.decode_records_as(data, 1, 5, BASE_TS, None, ConsumerRecord, "t", 1, 0)
    assert type(q) is ConsumerRecord and q == ConsumerRecord("t", 1, 5, BASE_TS, 0, b"k",
                                                             b"v", ())
