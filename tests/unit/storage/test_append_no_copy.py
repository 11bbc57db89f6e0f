"""The produce path writes the request's own bytes around new batch headers
(`validation.stamp_offsets`, `LogSegment.append` with pieces) instead of patching a copy:
the file must hold exactly what the copy-and-patch path (`assign_offsets`) writes, and
the caller's bytes must stay as they were."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest

from tidegate.records.batch import validate_batch
from tidegate.storage import segment as segment_module
from tidegate.storage.config import LogConfig
from tidegate.storage.validation import assign_offsets, stamp_offsets

from ._support import all_batches, batch, headers_of, open_log

BIG = LogConfig(segment_bytes=1 << 20)


@pytest.mark.parametrize("leader_epoch", [None, 7])
def test_stamped_pieces_equal_the_patched_copy(leader_epoch: int | None) -> None:
    data = batch(3, tag=1) + batch(1, tag=2) + batch(5, value_size=300, tag=3)
    positions, pos = [], 0
    for h in headers_of(data):
        positions.append(pos)
        pos += h.size
    copy = bytearray(data)
    want = assign_offsets(copy, positions, 40, log_append_time=None, leader_epoch=leader_epoch)
    got, pieces = stamp_offsets(memoryview(data), positions, 40, leader_epoch=leader_epoch)
    assert got == want
    assert b"".join(pieces) == copy
    assert [h.base_offset for h in got] == [40, 43, 44]
    for p in positions:  # the CRC still holds: it does not cover what was patched
        validate_batch(copy, p)


def test_log_writes_the_requests_bytes_unchanged_but_for_offsets(tmp_path: Path) -> None:
    lg = open_log(tmp_path, BIG)
    lg.append(batch(2, tag=0))
    sent = batch(4, value_size=100, tag=1)
    before = bytes(sent)
    info = lg.append(sent, leader_epoch=3)
    assert sent == before  # the caller's bytes are read, never patched
    assert info.first_offset == 2 and info.last_offset == 5
    stored = all_batches(lg)
    h, raw = stored[-1]
    assert (h.base_offset, h.partition_leader_epoch) == (2, 3)
    assert raw[8:12] == sent[8:12] and raw[16:] == sent[16:]  # length and the rest as sent
    lg.close()


def test_a_short_gathered_write_goes_on_where_it_stopped(tmp_path: Path) -> None:
    """pwritev may write less than asked: the rest, from within a piece, follows."""
    real = os.pwritev
    calls = []

    def short(fd: int, pieces: list[memoryview], pos: int) -> int:
        calls.append(sum(len(p) for p in pieces))
        total = sum(len(p) for p in pieces)
        return real(fd, [memoryview(b"".join(pieces))[: max(1, total // 3)]], pos)

    lg = open_log(tmp_path, BIG)
    data = batch(6, value_size=200, tag=4)
    with mock.patch.object(segment_module.os, "pwritev", short):
        lg.append(data)
    assert len(calls) > 2
    (h, raw), = all_batches(lg)
    assert raw[8:] == data[8:] and h.base_offset == 0
    lg.close()
