"""Other people's record code as the oracle: kafka-python and aiokafka.

Both directions: their builders' batches must decode identically with ours, and our
batches must read back identically with theirs. aiokafka is checked through its C
extension and its pure-Python fallback, which are separate implementations.
kafka-python handles gzip itself; snappy goes through its own xerial framing over a
cramjam shim (python-snappy, lz4 and zstandard are not installed), so lz4 and zstd are
covered by aiokafka only.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from typing import Any

import cramjam
import pytest
from aiokafka.record import default_records as aio_default
from aiokafka.record import memory_records as aio_memory
from aiokafka.record.control_record import ABORT_MARKER, COMMIT_MARKER, ControlRecord
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_python_codec
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from kafka.record.memory_records import MemoryRecords as KpMemoryRecords
from kafka.record.memory_records import MemoryRecordsBuilder as KpMemoryRecordsBuilder

from tidegate.records import (
    Codec,
    ControlType,
    Record,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
)

from ._support import RecordTuple, compressible_records, records_st

AIO_READERS = {
    "aiokafka-c": aio_default.DefaultRecordBatch,
    "aiokafka-py": aio_default._DefaultRecordBatchPy,
}
AIO_BUILDERS = {
    "aiokafka-c": aio_default.DefaultRecordBatchBuilder,
    "aiokafka-py": aio_default._DefaultRecordBatchBuilderPy,
}
KP_CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY]


@pytest.fixture(autouse=True)
def kafka_python_snappy(monkeypatch: pytest.MonkeyPatch) -> None:
    shim = types.SimpleNamespace(
        compress=lambda b: bytes(cramjam.snappy.compress_raw(b)),
        decompress=lambda b: bytes(cramjam.snappy.decompress_raw(b)),
    )
    monkeypatch.setattr(kafka_python_codec, "snappy", shim)


def as_records(batch: Any) -> list[Record]:
    """A third-party batch's records, in our shape."""
    return [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch]


def build_with(
    builder_cls: Callable[..., Any], records: list[RecordTuple], codec: Codec, **state: Any
) -> bytes:
    builder = builder_cls(
        magic=2,
        compression_type=int(codec),
        is_transactional=state.get("is_transactional", 0),
        producer_id=state.get("producer_id", -1),
        producer_epoch=state.get("producer_epoch", -1),
        base_sequence=state.get("base_sequence", -1),
        batch_size=1 << 30,
    )
    for i, (ts, key, value, headers) in enumerate(records):
        assert builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(builder.build())


def theirs_then_ours(
    builder_cls: Callable[..., Any], records: list[RecordTuple], codec: Codec
) -> None:
    buf = build_with(builder_cls, records, codec)
    header, decoded = decode_records(buf)
    their_reader = KpBatch(buf)
    assert their_reader.validate_crc()
    assert decoded == as_records(their_reader)
    assert decoded == [Record(i, ts, k, v, tuple(h)) for i, (ts, k, v, h) in enumerate(records)]
    assert header.base_timestamp == their_reader.first_timestamp
    assert header.max_timestamp == their_reader.max_timestamp


def ours_then_theirs(records: list[RecordTuple], codec: Codec) -> Iterator[list[Record]]:
    buf = build_batch(records, compression=codec, base_offset=100)
    _, ours = decode_records(buf)
    readers: dict[str, Callable[[bytes], Any]] = dict(AIO_READERS)
    if codec in KP_CODECS:
        readers["kafka-python"] = KpBatch
    for name, reader_cls in readers.items():
        reader = reader_cls(buf)
        assert reader.validate_crc(), name
        assert reader.compression_type == codec, name
        assert reader.next_offset == 100 + len(records), name
        theirs = as_records(reader)
        assert theirs == ours, name
        yield theirs


# -- Their builders, our decoder -----------------------------------------------------


@pytest.mark.parametrize("codec", KP_CODECS)
def test_kafka_python_batches_decode(codec: Codec) -> None:
    records = compressible_records()
    buf = build_with(KpBuilder, records, codec)
    assert decode_records(buf)[0].compression == codec  # compression was kept
    theirs_then_ours(KpBuilder, records, codec)


@pytest.mark.parametrize("builder", list(AIO_BUILDERS))
@pytest.mark.parametrize("codec", list(Codec))
def test_aiokafka_batches_decode(builder: str, codec: Codec) -> None:
    records = compressible_records()
    buf = build_with(AIO_BUILDERS[builder], records, codec)
    header, decoded = decode_records(buf)
    assert header.compression == codec
    assert decoded == as_records(aio_default.DefaultRecordBatch(buf))


@given(records_st, st.sampled_from(KP_CODECS))
@settings(max_examples=60, deadline=None)
def test_kafka_python_arbitrary_batches_decode(records: list[RecordTuple], codec: Codec) -> None:
    theirs_then_ours(KpBuilder, records, codec)


@given(records_st, st.sampled_from(list(Codec)))
@settings(max_examples=60, deadline=None)
def test_aiokafka_arbitrary_batches_decode(records: list[RecordTuple], codec: Codec) -> None:
    buf = build_with(AIO_BUILDERS["aiokafka-c"], records, codec)
    _, decoded = decode_records(buf)
    assert decoded == as_records(aio_default._DefaultRecordBatchPy(buf))


def test_kafka_python_producer_state_is_read() -> None:
    buf = build_with(
        KpBuilder,
        compressible_records(3),
        Codec.GZIP,
        is_transactional=1,
        producer_id=77,
        producer_epoch=3,
        base_sequence=40,
    )
    header, _ = decode_records(buf)
    assert header.is_transactional and not header.is_control
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 40)
    assert header.last_sequence == 42


def test_kafka_python_memory_records_builder_decodes() -> None:
    builder = KpMemoryRecordsBuilder(magic=2, compression_type=1, batch_size=1 << 20, offset=0)
    for ts, key, value, headers in compressible_records(10):
        builder.append(ts, key, value, headers)
    builder.close()
    ((header, decoded),) = iter_batches(bytes(builder.buffer()))
    assert header.compression == Codec.GZIP
    assert [r.offset for r in decoded] == list(range(10))


# -- Our builder, their readers ------------------------------------------------------


@pytest.mark.parametrize("codec", list(Codec))
def test_our_batches_read_with_their_readers(codec: Codec) -> None:
    for theirs in ours_then_theirs(compressible_records(), codec):
        assert len(theirs) == 50


@given(records_st, st.sampled_from(list(Codec)))
@settings(max_examples=100, deadline=None)
def test_our_arbitrary_batches_read_with_their_readers(
    records: list[RecordTuple], codec: Codec
) -> None:
    for _ in ours_then_theirs(records, codec):
        pass


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
def test_our_concatenated_batches_read_with_memory_records(codec: Codec) -> None:
    batches = [
        build_batch(compressible_records(5), compression=codec, base_offset=5 * i) for i in range(3)
    ]
    stream = b"".join(batches) + batches[0][:30]  # plus a partial tail, like a fetch
    for memory_records in (KpMemoryRecords(stream), aio_memory.MemoryRecords(stream)):
        offsets: list[int] = []
        while memory_records.has_next():
            offsets.extend(r.offset for r in memory_records.next_batch())
        assert offsets == list(range(15))


def test_log_append_time_read_with_their_readers() -> None:
    records: list[RecordTuple] = [(1000 + i, None, b"v", []) for i in range(3)]
    buf = build_batch(records, timestamp_type=1)
    for reader_cls in (KpBatch, *AIO_READERS.values()):
        reader = reader_cls(buf)
        assert reader.timestamp_type == 1
        assert [r.timestamp for r in reader] == [1002] * 3


# -- Control batches -------------------------------------------------------------------
# Neither library builds control batches (only brokers do), so check ours with their
# readers: kafka-python parses control records, aiokafka parses the key.


@pytest.mark.parametrize("control_type", list(ControlType))
def test_control_batches_read_with_their_readers(control_type: ControlType) -> None:
    buf = build_control_batch(
        producer_id=9,
        producer_epoch=4,
        control_type=control_type,
        coordinator_epoch=12,
        timestamp=5000,
        base_offset=33,
    )
    batch = KpBatch(buf)
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 4, -1)
    (record,) = list(batch)
    assert (record.offset, record.timestamp, record.version, record.type) == (
        33,
        5000,
        0,
        int(control_type),
    )
    assert record.commit == (control_type == ControlType.COMMIT)

    aio = aio_default.DefaultRecordBatch(buf)
    assert aio.is_control_batch and aio.is_transactional
    (aio_record,) = list(aio)
    marker = ControlRecord.parse(aio_record.key)
    assert marker == (COMMIT_MARKER if control_type == ControlType.COMMIT else ABORT_MARKER)
