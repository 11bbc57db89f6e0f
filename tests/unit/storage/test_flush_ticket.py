"""What a flush captures (`Log.begin_flush`): every segment holding data at or above
the recovery point, and every segment rolled since the last flush, whatever the mix of
appends, rolls and flushes before it. A flush with no roll since the last one takes a
shortcut (only the active segment, without the bisect: it runs per log in a 1,000-log
flush round); these tests fail if the shortcut leaves out a segment that needs a sync,
or if a flush leaves a rolled segment listed as unsynced."""

from __future__ import annotations

import random
from pathlib import Path

from tidegate.storage.log import Log

from ._support import batch, open_log


def _needed(lg: Log) -> list[int]:
    """Bases of the segments a flush must sync now: from the one holding the recovery
    point (or the oldest rolled unsynced one) to the active one."""
    rolled = [seg.base_offset for seg in lg._rolled_unsynced]
    start = min([lg.recovery_point, *rolled])
    return [seg.base_offset for seg in lg.segments
            if seg.next_offset > start or seg is lg.segments[-1]]


def test_a_flush_captures_every_segment_that_needs_a_sync(tmp_path: Path) -> None:
    rng = random.Random(7)
    lg = open_log(tmp_path / "t-0")
    shortcuts = 0
    try:
        for step in range(300):
            if rng.random() < 0.6:
                lg.append(batch(rng.randint(1, 6), value_size=rng.choice((10, 200)),
                                tag=step))
                continue
            shortcut = not lg._rolled_unsynced
            ticket = lg.begin_flush()
            assert ticket is not None
            try:
                assert [s.base_offset for s in ticket.todo] == _needed(lg)
                assert ticket.target == lg.log_end_offset
            finally:
                lg.abort_flush(ticket)
            shortcuts += shortcut
            assert lg.flush() == lg.log_end_offset
            assert lg._rolled_unsynced == []  # synced: none left listed
            assert lg.recovery_point == lg.log_end_offset
        assert len(lg.segments) > 5 and shortcuts > 10  # both paths were taken
    finally:
        lg.close()
