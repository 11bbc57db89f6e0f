"""ProducerIdManager: unique, increasing ids across restarts and crashes; epoch bumps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tidegate.common.errors import KafkaStorageError
from tidegate.coordinator.producer_ids import (
    MAX_PRODUCER_ID,
    SHORT_MAX,
    ProducerIdManager,
    ProducerIdsExhaustedError,
    bump_epoch,
    is_epoch_exhausted,
)

SRC = Path(__file__).resolve().parents[3] / "src"


def test_ids_unique_and_increasing_across_many_restarts(tmp_path: Path) -> None:
    state = tmp_path / "producer_ids.json"
    seen: list[int] = []
    for restart in range(40):
        mgr = ProducerIdManager(state, block_size=7)
        seen.extend(mgr.next_id() for _ in range(restart % 11))  # 0..10 ids, across blocks
    assert seen == sorted(set(seen))
    assert seen[0] == 0


def test_block_is_durable_before_its_first_id(tmp_path: Path) -> None:
    state = tmp_path / "producer_ids.json"
    mgr = ProducerIdManager(state)
    assert not state.exists()
    assert mgr.next_id() == 0
    assert json.loads(state.read_text()) == {"version": 1, "block_start": 0, "block_end": 999}
    assert mgr.current_block == (0, 999)
    assert [mgr.next_id() for _ in range(999)][-1] == 999
    assert mgr.next_id() == 1000  # second block reserved on demand
    assert json.loads(state.read_text())["block_end"] == 1999


def test_crash_after_reserving_before_using_never_reuses(tmp_path: Path) -> None:
    state = tmp_path / "producer_ids.json"
    a = ProducerIdManager(state)
    first = a.next_id()
    # "crash" with the rest of block 0 unused and a torn temp file left behind
    (tmp_path / "producer_ids.json.tmp").write_bytes(b'{"version": 1, "blo')
    b = ProducerIdManager(state)
    assert b.next_id() == 1000 > first
    # a reserved block that never handed out an id is skipped too
    del a, b
    c = ProducerIdManager(state)
    assert c.next_id() == 2000


def test_kill_9_midway_never_reuses_ids(tmp_path: Path) -> None:
    """A real process handing out ids is SIGKILLed; the next one starts above them."""
    state = tmp_path / "producer_ids.json"
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(SRC)!r})
        from pathlib import Path
        from tidegate.coordinator.producer_ids import ProducerIdManager
        mgr = ProducerIdManager(Path({str(state)!r}), block_size=10)
        for _ in range(int(sys.argv[1])):
            print(mgr.next_id(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    handed_out: list[int] = []
    for n in (3, 10, 0, 25, 1):
        proc = subprocess.run(
            [sys.executable, "-c", script, str(n)], capture_output=True, text=True, check=False
        )
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        handed_out.extend(int(line) for line in proc.stdout.split())
    assert handed_out == sorted(set(handed_out))
    assert ProducerIdManager(state, block_size=10).next_id() > handed_out[-1]


def test_unreadable_state_file_is_an_error_not_a_restart_from_zero(tmp_path: Path) -> None:
    state = tmp_path / "producer_ids.json"
    for bad in ("", "{}", '{"version": 2, "block_start": 0, "block_end": 9}', "[1]", "nope"):
        state.write_text(bad)
        with pytest.raises(KafkaStorageError):
            ProducerIdManager(state)


def test_exhaustion(tmp_path: Path) -> None:
    state = tmp_path / "producer_ids.json"
    start = MAX_PRODUCER_ID - 1
    state.write_text(json.dumps({"version": 1, "block_start": start - 2, "block_end": start}))
    mgr = ProducerIdManager(state, block_size=1)
    assert mgr.next_id() == MAX_PRODUCER_ID
    with pytest.raises(ProducerIdsExhaustedError):
        mgr.next_id()


def test_bump_epoch_rule(tmp_path: Path) -> None:
    fresh = iter(range(500, 600))

    def alloc() -> int:
        return next(fresh)

    assert not is_epoch_exhausted(SHORT_MAX - 2)
    assert is_epoch_exhausted(SHORT_MAX - 1) and is_epoch_exhausted(SHORT_MAX)
    assert bump_epoch(-1, -1, alloc) == (500, 0)  # no id yet
    assert bump_epoch(7, -1, alloc) == (7, 0)
    assert bump_epoch(7, 0, alloc) == (7, 1)
    assert bump_epoch(7, 32765, alloc) == (7, 32766)  # the last usable epoch
    assert bump_epoch(7, 32766, alloc) == (501, 0)  # exhausted: rotate the id
    assert bump_epoch(7, 32767, alloc) == (502, 0)  # after a fence bump
    mgr = ProducerIdManager(tmp_path / "ids.json")
    assert mgr.bump_epoch(-1, -1) == (0, 0)
    assert mgr.bump_epoch(0, 32766) == (1, 0)


def test_state_file_written_atomically(tmp_path: Path) -> None:
    state = tmp_path / "producer_ids.json"
    ProducerIdManager(state).next_id()
    assert sorted(os.listdir(tmp_path)) == ["producer_ids.json"]
