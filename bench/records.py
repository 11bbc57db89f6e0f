"""Rough build/decode throughput of the records layer (a script, not a test).

    .venv/bin/python bench/records.py [--per-record-only]

First, microseconds per record of the two per-record loops, pure Python beside the C
extension `tidegate.records._speedups` (when built): decoding a records section
(`decode_record_tuples`) and `BatchBuilder.append`, for 100-byte and 1 KiB values.

Then 1000-record batches of 100-byte hex values (about 2:1 compressible) with 8-byte
keys: records/second for whole batches (build; decode with CRC check and `Record`
objects) for Tidegate and, for context, aiokafka's C extension and kafka-python's
pure-Python implementation.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from functools import partial
from types import ModuleType

from tidegate.records import BatchBuilder, Codec, decode_records, parse_header
from tidegate.records import builder as _builder
from tidegate.records import record as _record
from tidegate.records.batch import HEADER_SIZE

N = 1000
ROUNDS = 30
KEYS = [b"key-%04d" % i for i in range(N)]
VALUES = [os.urandom(50).hex().encode() for _ in range(N)]
TS0 = 1_700_000_000_000


def rate(fn: Callable[[], object]) -> float:
    fn()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(ROUNDS):
            fn()
        best = min(best, time.perf_counter() - t0)
    return N * ROUNDS / best


def tidegate_build(codec: Codec) -> bytes:
    b = BatchBuilder(compression=codec)
    append = b.append
    for i in range(N):
        append(TS0 + i, KEYS[i], VALUES[i])
    return b.build()


def aiokafka_build(codec: int) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 30)
    for i in range(N):
        b.append(i, TS0 + i, KEYS[i], VALUES[i], [])
    return bytes(b.build())


def aiokafka_decode(buf: bytes) -> None:
    from aiokafka.record.default_records import DefaultRecordBatch

    batch = DefaultRecordBatch(buf)
    batch.validate_crc()
    list(batch)


def kafka_python_build(codec: int) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 30)
    for i in range(N):
        b.append(i, TS0 + i, KEYS[i], VALUES[i], [])
    return bytes(b.build())


def kafka_python_decode(buf: bytes) -> None:
    from kafka.record.default_records import DefaultRecordBatch

    batch = DefaultRecordBatch(buf)
    batch.validate_crc()
    list(batch)


def report(codec: Codec) -> None:
    buf = tidegate_build(codec)
    print(f"{codec.name}: batch {len(buf)} bytes")
    print(f"  tidegate     build  {rate(lambda: tidegate_build(codec)):>12,.0f} rec/s")
    print(f"  tidegate     decode {rate(lambda: decode_records(buf)):>12,.0f} rec/s")
    print(f"  aiokafka(C)  build  {rate(lambda: aiokafka_build(codec)):>12,.0f} rec/s")
    print(f"  aiokafka(C)  decode {rate(lambda: aiokafka_decode(buf)):>12,.0f} rec/s")
    if codec == Codec.NONE:  # kafka-python needs the lz4 package for LZ4
        print(f"  kafka-python build  {rate(lambda: kafka_python_build(codec)):>12,.0f} rec/s")
        print(f"  kafka-python decode {rate(lambda: kafka_python_decode(buf)):>12,.0f} rec/s")


def us_per_record(fn: Callable[[], object]) -> float:
    return 1e6 / rate(fn)


def append_all(cls: type, values: list[bytes]) -> object:
    b = cls()
    append = b.append
    for i in range(N):
        append(TS0 + i, KEYS[i], values[i])
    return b


def per_record_row(size: int, speedups: ModuleType | None) -> None:
    values = [os.urandom(size // 2).hex().encode() for _ in range(N)]
    batch = BatchBuilder()
    for i in range(N):
        batch.append(TS0 + i, KEYS[i], values[i])
    buf = batch.build()
    header = parse_header(buf)
    section = bytes(buf[HEADER_SIZE:])
    py_dec = us_per_record(partial(_record._decode_record_tuples_py, header, section))
    py_enc = us_per_record(partial(append_all, _builder._PyRecordBuffer, values))
    c_dec = c_enc = float("nan")
    if speedups is not None:
        args = (section, header.records_count, header.base_offset, header.base_timestamp, None)
        c_dec = us_per_record(partial(speedups.decode_records, *args))
        c_enc = us_per_record(partial(append_all, speedups.RecordBuffer, values))
    for name, py, c in (("decode", py_dec, c_dec), ("encode (append)", py_enc, c_enc)):
        label = f"{name}, {size} B values"
        print(f"  {label:32}{py:>12.3f}{c:>9.3f}{py / c:>9.1f}x")


def per_record_report() -> None:
    """Pure Python vs C, microseconds per record, for both per-record loops."""
    speedups: ModuleType | None
    try:
        from tidegate.records import _speedups as speedups
    except ImportError:
        speedups = None
    active = "C extension" if _builder.SPEEDUPS else "pure Python"
    print(f"microseconds per record (BatchBuilder and decode_record_tuples use: {active})")
    print(f"  {'':32}{'pure Python':>12}{'C':>9}{'speed-up':>10}")
    for size in (100, 1024):
        per_record_row(size, speedups)
    print()


def main() -> None:
    per_record_report()
    if "--per-record-only" in sys.argv:
        return
    for codec in (Codec.NONE, Codec.LZ4):
        report(codec)


if __name__ == "__main__":
    main()
