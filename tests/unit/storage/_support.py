"""Helpers for the storage tests: batch builders, a linear reference scan, file fiddling."""

from __future__ import annotations

from pathlib import Path

from tidegate.common.clock import ManualClock
from tidegate.records.batch import BatchHeader, iter_headers
from tidegate.records.builder import build_batch
from tidegate.storage.config import LogConfig
from tidegate.storage.log import Log

BASE_TS = 1_700_000_000_000

# Small segments and a dense index so a few KB of data exercise rolls and lookups.
SMALL = LogConfig(segment_bytes=2048, index_interval_bytes=128, segment_index_bytes=4096)


def batch(
    n: int = 1,
    *,
    ts: int = BASE_TS,
    value_size: int = 20,
    key: bytes | None = b"k",
    tag: int = 0,
) -> bytes:
    """A batch of `n` records with timestamps ts, ts+1, ... and recognisable values."""
    return build_batch(
        [(ts + i, key, b"%d:%d:" % (tag, i) + b"x" * max(0, value_size - 8)) for i in range(n)]
    )


def keyed(records: list[tuple[bytes | None, bytes | None]], *, ts: int = BASE_TS) -> bytes:
    return build_batch([(ts + i, k, v) for i, (k, v) in enumerate(records)])


def open_log(path: Path, config: LogConfig = SMALL, clock: ManualClock | None = None,
             **kw: object) -> Log:  # fmt: skip
    return Log.open(path / "topic-0", config, clock or ManualClock(BASE_TS), **kw)  # type: ignore[arg-type]


def headers_of(data: bytes) -> list[BatchHeader]:
    return list(iter_headers(data))


def all_batches(log: Log) -> list[tuple[BatchHeader, bytes]]:
    """Every stored batch, by scanning the segment files directly (the reference)."""
    out = []
    for seg in log.segments:
        raw = seg.log_path.read_bytes()
        pos = 0
        for h in iter_headers(raw):
            out.append((h, raw[pos : pos + h.size]))
            pos += h.size
    return out


def fill(
    log: Log, count: int, *, records: int = 3, value_size: int = 40, hw: bool = True
) -> list[bytes]:
    """Append `count` batches; return the stored bytes of each (offsets assigned). With
    `hw`, the high watermark then moves to the log end (the server's job; retention
    needs it)."""
    for i in range(count):
        log.append(batch(records, ts=BASE_TS + i * 10, value_size=value_size, tag=i))
    if hw:
        log.update_high_watermark(log.log_end_offset)
    return [raw for _, raw in all_batches(log)]
