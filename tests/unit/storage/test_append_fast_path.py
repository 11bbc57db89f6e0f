"""`Log.append(single_batch=True)`'s fast case (one whole batch, checked in one step,
`log_append._append_one`) must do exactly what the general steps do: the same answer
or the same error (class, message, record errors), the same bytes on disk, the same
high watermark and LSO. Each scenario runs on two fresh logs, one with the fast case
turned off (`check_produce_batch` answering None sends every append the general way)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from tidegate.common.clock import ManualClock
from tidegate.records import _accel
from tidegate.records.batch import NO_SEQUENCE
from tidegate.records.builder import build_batch
from tidegate.records.compression import Codec
from tidegate.storage import log_append
from tidegate.storage import segment as segment_module
from tidegate.storage.config import LogConfig
from tidegate.storage.log import Log

from ._support import BASE_TS, all_batches, batch, keyed, open_log

pytestmark = pytest.mark.skipif(_accel.check_batch is None, reason="needs the C extension")

HOUR = 3_600_000


def idem(seq: int, n: int = 1, *, pid: int = 7, epoch: int = 0, txn: bool = False) -> bytes:
    return build_batch([(BASE_TS + i, b"k", b"v%d" % i) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, is_transactional=txn)


def corrupt(data: bytes) -> bytes:
    raw = bytearray(data)
    raw[-1] ^= 0xFF  # under the CRC
    return bytes(raw)


# name -> (topic config, the appends: (data, append's keywords))
Appends = list[tuple[bytes, dict[str, Any]]]
SCENARIOS: dict[str, tuple[dict[str, str], Appends]] = {
    "plain": ({}, [(batch(1), {}), (batch(5, tag=1), {}), (batch(2, tag=2), {})]),
    "leader epoch": ({}, [(batch(2), {"leader_epoch": 4}), (batch(1), {"leader_epoch": 5})]),
    "no key, not compacted": ({}, [(keyed([(None, b"v")]), {})]),
    "no key, compacted": ({"cleanup.policy": "compact"},
                          [(keyed([(b"a", b"v"), (None, b"w"), (None, b"x")]), {})]),
    "future records": ({}, [(batch(3, ts=BASE_TS + 2 * HOUR), {})]),
    "some records in the future": (
        {}, [(build_batch([(BASE_TS, b"k", b"a"), (BASE_TS + 2 * HOUR, b"k", b"b")]), {})]),
    "old records, before limit": ({"message.timestamp.before.max.ms": "1000"},
                                  [(batch(2, ts=BASE_TS - 5000), {})]),
    "old records, no limit": ({}, [(batch(2, ts=BASE_TS - 10 * HOUR), {})]),
    "no limits at all": ({"message.timestamp.after.max.ms": str((1 << 63) - 1)},
                         [(batch(2, ts=BASE_TS + 10 * HOUR), {})]),
    "no timestamp": ({}, [(batch(2, ts=-1), {})]),
    "no timestamp, before limit": (  # the range is out, yet no record is: appended
        {"message.timestamp.before.max.ms": "1000"},
        [(build_batch([(-1, b"k", b"a"), (BASE_TS, b"k", b"b")]), {})]),
    "negative timestamps": ({"message.timestamp.before.max.ms": "1000"},
                            [(batch(1, ts=-5), {})]),
    "compressed": ({}, [(build_batch([(BASE_TS, b"k", b"v" * 50)] * 3,
                                     compression=Codec.GZIP), {})]),
    "log append time": ({"message.timestamp.type": "LogAppendTime"}, [(batch(2), {})]),
    "producer log append time": ({}, [(build_batch([(BASE_TS, b"k", b"v")],
                                                   timestamp_type=1), {})]),
    "too large": ({"max.message.bytes": "200"}, [(batch(1, value_size=400), {})]),
    "over segment.bytes": ({"segment.bytes": "14", "max.message.bytes": "100000"},
                           [(batch(1), {})]),
    "two batches": ({}, [(batch(1) + batch(1, tag=1), {})]),
    "empty": ({}, [(b"", {})]),
    "bad crc": ({}, [(corrupt(batch(2)), {})]),
    "idempotent, retried": ({}, [(idem(0, 2), {}), (idem(2), {}), (idem(0, 2), {})]),
    "idempotent, out of order": ({}, [(idem(0), {}), (idem(5), {})]),
    "idempotent, no sequence": ({}, [(idem(NO_SEQUENCE), {})]),
    "idempotent, old epoch": ({}, [(idem(0, epoch=3), {}), (idem(1, epoch=2), {})]),
    "transactional, unverified": ({}, [(idem(0, txn=True), {"verification_guard": None})]),
    "transactional": ({}, [(idem(0, txn=True), {}), (idem(1, txn=True), {})]),
    "rolls": ({"segment.bytes": "300"}, [(batch(2, value_size=60, tag=i), {}) for i in range(8)]),
}


def run(tmp: Path, configs: dict[str, str], appends: Appends, *, advance_hw: bool) -> list[Any]:
    lg = open_log(tmp, LogConfig.from_props(configs) if configs else LogConfig(),
                  ManualClock(BASE_TS))
    seen: list[Any] = []
    try:
        for data, kw in appends:
            try:
                info = lg.append(data, single_batch=True, advance_hw=advance_hw, **kw)
            except Exception as e:  # the error, as the handler would answer it
                seen.append((type(e).__name__, str(e), getattr(e, "record_errors", None)))
            else:
                seen.append(info)
            seen.append((lg.log_end_offset, lg.high_watermark, lg.last_stable_offset))
        seen.append(all_batches(lg))
    finally:
        lg.close()
    return seen


@pytest.mark.parametrize("advance_hw", [False, True])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_fast_case_matches_the_general_steps(tmp_path: Path, name: str,
                                             advance_hw: bool) -> None:
    configs, appends = SCENARIOS[name]
    fast = run(tmp_path / "fast", configs, appends, advance_hw=advance_hw)
    with mock.patch.object(log_append, "check_produce_batch", lambda *_: None):
        general = run(tmp_path / "general", configs, appends, advance_hw=advance_hw)
    assert fast == general


def test_the_usual_batch_takes_the_fast_case(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig())
    taken: list[int] = []
    real: Callable[..., Any] = Log._append_one

    def spy(self: Log, *args: Any) -> Any:
        taken.append(1)
        return real(self, *args)

    with mock.patch.object(Log, "_append_one", spy):
        lg.append(batch(3), single_batch=True)
        lg.append(idem(0), single_batch=True)
        lg.append(batch(3), single_batch=False)  # internal callers: the general steps
    assert len(taken) == 2
    lg.close()


def test_advance_hw_moves_the_high_watermark_with_the_append(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig())
    lg.append(batch(3), single_batch=True)
    assert lg.high_watermark == 0
    lg.append(batch(2), single_batch=True, advance_hw=True)
    assert (lg.high_watermark, lg.last_stable_offset) == (5, 5)
    lg.close()


def test_a_short_write_of_one_batch_is_written_again_whole(tmp_path: Path) -> None:
    """`LogSegment.append_batch`: pwritev may write less than asked; the batch is then
    written whole by `append` (from where it began), and the segment's size counts it
    once."""
    real = os.pwritev
    calls: list[int] = []

    def short(fd: int, pieces: list[memoryview], pos: int) -> int:
        total = sum(len(p) for p in pieces)
        calls.append(total)
        return real(fd, [memoryview(b"".join(pieces))[: max(1, total // 3)]], pos)

    lg = open_log(tmp_path, LogConfig())
    data = batch(6, value_size=200, tag=4)
    with mock.patch.object(segment_module.os, "pwritev", short):
        info = lg.append(data, single_batch=True)
    assert len(calls) > 2 and info.first_offset == 0
    lg.append(batch(1, tag=5), single_batch=True)
    (h, raw), (h2, _) = all_batches(lg)
    assert raw[8:] == data[8:] and (h.base_offset, h2.base_offset) == (0, 6)
    assert lg.segments[-1].size == len(data) + h2.size
    lg.close()
