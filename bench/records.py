"""Rough build/decode throughput of the records layer (a script, not a test).

    PYTHONPATH=src .venv/bin/python tests/unit/records/bench_records.py

1000-record batches of 100-byte hex values (about 2:1 compressible) with 8-byte keys;
prints records/second for Tidegate and, for context, aiokafka's C extension and
kafka-python's pure-Python implementation. Belongs in bench/ once that exists.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from tidegate.records import BatchBuilder, Codec, decode_records

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


def main() -> None:
    for codec in (Codec.NONE, Codec.LZ4):
        report(codec)


if __name__ == "__main__":
    main()
